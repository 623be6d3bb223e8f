"""``accelify launch``: run a script on N processes, GPUs or machines (thin: parse, plan, run)."""

from __future__ import annotations

import sys

import click

from accelify.cli.exit_codes import exit_on_error
from accelify.cli.options import config_file_option, launch_options

CONTEXT = {"allow_interspersed_args": False,
           "help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT)
@launch_options
@config_file_option
@click.option("--module", "-m", "module", is_flag=True, default=False,
              help="SCRIPT is a module name, run as `python -m`.")
@click.option("--quiet", "-q", "quiet", is_flag=True, default=False, help="No banner.")
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch(script: str, script_args: tuple[str, ...], quiet: bool, **flags: object) -> None:
    """Run SCRIPT [SCRIPT_ARGS]... on several processes via torch.distributed.run.

    Every argument after SCRIPT belongs to the script. Precedence: command line > config file >
    environment > defaults. Hugging Face spellings (--num_processes, --multi_gpu, ...) work too.
    """
    from accelify.launch import plan as planning
    from accelify.launch import run

    with exit_on_error():
        options = planning.LaunchOptions(script=script, script_args=script_args, **flags)  # type: ignore[arg-type]
        plan = planning.resolve_plan(options)
        notes = run.check_script(plan) or ()  # before the banner: a missing file must not look like a start
        for warning in (*plan.warnings, *notes):
            click.echo(f"warning: {warning}", err=True)
        if not quiet:
            click.echo(plan.banner(), err=True)
        result = run.execute(plan)
    if result.alone:
        from accelify.launch.joined import alone_warning

        click.echo(alone_warning(script, result.alone, plan.world_size), err=True)
    if result.failure is not None:
        click.echo(result.failure.describe(), err=True)
    elif result.interrupted_by is not None:
        from accelify.launch.run import signal_name

        number = result.interrupted_by
        click.echo(f"accelify launch: stopped by signal {number} ({signal_name(number)}); "
                   "all workers were stopped.", err=True)
    sys.exit(result.exit_code)
