"""``accelify test``: launch the bundled checks with the configured processes and show a table."""

from __future__ import annotations

import sys

import click

from accelify.cli.exit_codes import exit_on_error
from accelify.cli.options import config_file_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_file_option
def test(config_file: str | None) -> None:
    """Check sharding, collectives, gradient sync and saving on the configured processes."""
    from accelify.launch.selftest import plan_checks, run_checks

    with exit_on_error():
        plan = plan_checks(config_file)
        for warning in plan.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(plan.banner(), err=True)
        outcome = run_checks(plan)
    from accelify.console import print_checks

    failing = next((c.name for c in outcome.checks if not c.passed), None)
    failure = outcome.launch.failure.describe() if outcome.launch.failure else "no report was written"
    print_checks(((c.name, c.passed, c.detail) for c in outcome.checks), passed=outcome.passed, failing=failing,
                 failure=failure)
    sys.exit(outcome.exit_code)
