"""``accelify test``: launch the bundled checks with the configured processes and show a table; ``--gpu`` validates
a GPU machine (the GPU test suite and the CUDA step-overhead benchmark) and shows one summary."""

from __future__ import annotations

import sys

import click

from accelify.cli.exit_codes import exit_on_error
from accelify.cli.options import config_file_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_file_option
@click.option("--gpu", "gpu", is_flag=True, default=False,
              help="Validate this GPU machine: run the GPU test suite and the CUDA step-overhead benchmark of a "
                   "source checkout, then one summary. Without a visible GPU: an error.")
def test(config_file: str | None, gpu: bool) -> None:
    """Check sharding, collectives, gradient sync and saving on the configured processes."""
    from accelify.console import print_checks

    if gpu:
        from accelify.errors import LaunchError
        from accelify.launch.gpu_check import run_gpu_check

        with exit_on_error():
            if config_file is not None:
                raise LaunchError("--gpu runs its own launches on every visible GPU; drop --config-file.")
            outcome = run_gpu_check()
        failing = next((name.strip() for name, ok, _ in outcome.rows if not ok), None)
        print_checks(outcome.rows, passed=outcome.passed, failing=failing, failure="")
        sys.exit(outcome.exit_code)

    from accelify.launch.selftest import plan_checks, run_checks

    with exit_on_error():
        plan = plan_checks(config_file)
        for warning in plan.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(plan.banner(), err=True)
        outcome = run_checks(plan)
    failing = next((c.name for c in outcome.checks if not c.passed), None)
    failure = outcome.launch.failure.describe() if outcome.launch.failure else "no report was written"
    print_checks(((c.name, c.passed, c.detail) for c in outcome.checks), passed=outcome.passed, failing=failing,
                 failure=failure)
    sys.exit(outcome.exit_code)
