"""``accelify config``: the questionnaire, ``config default`` and ``config show`` (thin: ask, build, write)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from accelify.cli.exit_codes import exit_on_error
from accelify.cli.options import config_file_option
from accelify.runtime.devices import default_device, default_process_count, read_device_facts
from accelify.runtime.launch_options import DEFAULT_PORT, MAX_PORT, OPTIONS
from accelify.runtime.precision_rules import MIXED_PRECISION_CHOICES, mixed_precision_choices


def _target(config_file: str | None) -> Path:
    """Where to write: --config-file, else ACCELIFY_CONFIG_FILE/ACCELERATE_CONFIG_FILE, else the user folder."""
    from accelify.runtime.config import config_file_location

    return config_file_location(config_file)[1]


def _ask(gpu_count: int) -> dict[str, Any]:
    """The questionnaire; every answer has a default (Enter accepts it) and is validated on entry."""
    from accelify.console import Questionnaire

    q = Questionnaire()
    q.title(f"accelify config: {gpu_count} GPU(s) visible here. Press Enter to accept a default.")
    cpu = q.confirm("Run on CPU only?", default=default_device(gpu_count) == "cpu")
    gpu_ids = "all"
    if not cpu:
        if gpu_count == 0:
            q.note("No GPU is visible here: this config will only launch on a machine with GPUs.")
        gpu_ids = _valid(q, 'Which GPUs ("all" or ids such as 0,1)?', "gpu_ids", "all", gpu_count)
    machines = _int(q, "How many machines?", 1, 1)
    machine_rank, ip, port, rdzv = 0, None, None, OPTIONS["rdzv_backend"].default
    if machines > 1:
        machine_rank = _int(q, "This machine's rank?", 0, 0, machines - 1)
        ip = _valid(q, "Address of machine 0 (main process IP)?", "main_process_ip", None, gpu_count)
        port = _int(q, "Port on machine 0?", DEFAULT_PORT, 1, MAX_PORT)  # 0 (a free port) is one machine only
        rendezvous = OPTIONS["rdzv_backend"]
        rdzv = q.ask("Rendezvous backend?", default=rendezvous.default, choices=list(rendezvous.choices))
    selected = len(gpu_ids.split(",")) if gpu_ids != "all" else gpu_count
    per_machine = default_process_count("cpu" if cpu else "cuda", selected)
    total = _int(q, "How many processes in total (over all machines)?", per_machine * machines, 1)
    precisions = list(mixed_precision_choices("cpu") if cpu else MIXED_PRECISION_CHOICES)
    precision = q.ask("Mixed precision?", default="no", choices=precisions)
    fsdp = q.confirm("Shard the model with FSDP?", default=False)
    debug = q.confirm("Debug mode (check collective shapes, slower)?", default=False)
    from accelify.runtime.config import make_config

    return make_config(cpu=cpu, num_processes=total, num_machines=machines, machine_rank=machine_rank,
                       main_process_ip=ip, main_process_port=port, gpu_ids=gpu_ids, mixed_precision=precision,
                       use_fsdp=fsdp, debug=debug, rdzv_backend=rdzv)


def _valid(q: Any, question: str, key: str, default: str | None, gpu_count: int) -> str:
    """Ask until the answer is a valid value of config key ``key`` (and, for gpu_ids, an existing GPU)."""
    from accelify.runtime.config import parse_config
    from accelify.runtime.errors import ConfigurationError

    while True:
        answer = q.ask(question, default=default)
        try:
            value = getattr(parse_config({key: answer}, "answer"), key)
            if value is None:
                raise ConfigurationError(f"answer: {key}={answer!r} is not valid; an answer is needed.")
        except ConfigurationError as exc:
            q.problem(str(exc))
            continue
        if key != "gpu_ids" or value == "all" or not gpu_count or all(int(i) < gpu_count for i in value.split(",")):
            return value
        q.problem(f"This machine has {gpu_count} GPU(s): use ids 0 to {gpu_count - 1}, or all.")


def _int(q: Any, question: str, default: int, low: int, high: int | None = None) -> int:
    while True:
        value = q.ask_int(question, default=default)
        if value >= low and (high is None or value <= high):
            return value
        q.problem(f"Please enter a number from {low}{f' to {high}' if high is not None else ' up'}.")


def _visible_gpus() -> int:
    return read_device_facts().gpu_count


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@config_file_option
@click.pass_context
def config(ctx: click.Context, config_file: str | None) -> None:
    """Answer a few questions and write the launch configuration (YAML, Accelerate's keys).

    The file goes to --config-file, else ACCELIFY_CONFIG_FILE/ACCELERATE_CONFIG_FILE, else
    $XDG_CONFIG_HOME/accelify/config.yaml. Subcommands: `default` (no questions), `show`.
    """
    if ctx.invoked_subcommand is not None:
        ctx.obj = config_file
        return
    from accelify.runtime.config import write_config

    with exit_on_error():
        try:
            data = _ask(_visible_gpus())
        except (EOFError, KeyboardInterrupt):
            click.echo("\nerror: the questionnaire was interrupted; nothing was written. "
                       "Use `accelify config default` to write a config without questions.", err=True)
            sys.exit(1)
        path = write_config(data, _target(config_file))
    click.echo(f"Configuration written to {path}")


@config.command("default")
@config_file_option
@click.option("--mixed-precision", "--mixed_precision", "mixed_precision", type=click.Choice(MIXED_PRECISION_CHOICES),
              default="no", show_default=True)
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.pass_obj
def default(parent_file: str | None, config_file: str | None, mixed_precision: str, force: bool) -> None:
    """Write a config for this machine without questions: every GPU, else one CPU process."""
    from accelify.runtime.config import basic_config, write_config

    path = _target(config_file or parent_file)
    if path.exists() and not force:
        click.echo(f"error: {path} already exists; pass --force to overwrite it.", err=True)
        sys.exit(2)
    with exit_on_error():
        written = write_config(basic_config(mixed_precision, _visible_gpus()), path)
    click.echo(f"Configuration written to {written}")


@config.command("show")
@config_file_option
@click.pass_obj
def show(parent_file: str | None, config_file: str | None) -> None:
    """Print the config file in use and its contents (after checking them)."""
    from accelify.runtime.config import find_config_file, load_config

    with exit_on_error():
        path = find_config_file(config_file or parent_file)
        if path is None:
            click.echo("No config file in use: defaults apply (one process per GPU, else one CPU process).")
            click.echo(f"Create one with `accelify config` (written to {_target(None)}).")
            return
        loaded = load_config(path)
    for warning in loaded.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"# {path}")
    click.echo(path.read_text(encoding="utf-8").rstrip())
