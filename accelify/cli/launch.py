"""``accelify launch``: run a script on N processes, GPUs or machines (thin: parse, plan, run)."""

from __future__ import annotations

import sys

import click

from accelify.cli.exit_codes import exit_on_error
from accelify.cli.options import config_file_option
from accelify.runtime.settings import MIXED_PRECISION_CHOICES

CONTEXT = {"allow_interspersed_args": False,
           "help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT)
@click.option("--num-processes", "--num_processes", "-n", "num_processes", type=int,
              help="Processes in total, over all machines (default: one per visible GPU, else 1).")
@click.option("--num-machines", "--num_machines", "num_machines", type=int, help="Machines taking part.")
@click.option("--machine-rank", "--machine_rank", "machine_rank", type=int, help="This machine's rank, 0 to N-1.")
@click.option("--main-process-ip", "--main_process_ip", "main_process_ip", help="Address of machine 0.")
@click.option("--main-process-port", "--main_process_port", "main_process_port", type=int,
              help="Port on machine 0 (0: pick a free one; one machine only).")
@click.option("--cpu", "cpu", is_flag=True, default=None, help="Run on CPU processes (Gloo), even with GPUs.")
@click.option("--multi-gpu", "--multi_gpu", "multi_gpu", is_flag=True, default=None,
              help="Distributed on GPUs (an error without GPUs).")
@click.option("--gpu-ids", "--gpu_ids", "gpu_ids", help='GPUs to use: "all" or indices such as 0,1.')
@click.option("--mixed-precision", "--mixed_precision", "mixed_precision",
              type=click.Choice(MIXED_PRECISION_CHOICES), help="Mixed precision for the Accelerator.")
@click.option("--gradient-accumulation-steps", "--gradient_accumulation_steps", "gradient_accumulation_steps",
              type=int, help="Gradient accumulation steps for the Accelerator.")
@click.option("--debug", "debug", is_flag=True, default=None, help="Debug mode: check collective shapes.")
@config_file_option
@click.option("--max-restarts", "--max_restarts", "max_restarts", type=int,
              help="Restart the worker group up to N times after a failure.")
@click.option("--monitor-interval", "--monitor_interval", "monitor_interval", type=float,
              help="Seconds between checks of the workers' health.")
@click.option("--rdzv-backend", "--rdzv_backend", "rdzv_backend", type=click.Choice(["static", "c10d"]),
              help="Rendezvous between machines (default static).")
@click.option("--use-fsdp", "--use_fsdp", "use_fsdp", is_flag=True, default=None,
              help="Shard the model with FSDP2.")
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
        run.check_script(plan)  # before the banner: a missing file must not look like a start
        for warning in plan.warnings:
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
