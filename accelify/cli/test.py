"""``accelify test``: launch the bundled checks with the configured processes and show a table."""

from __future__ import annotations

import sys

import click

from accelify.cli.launch_support import config_file_option, exit_on_error


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_file_option
def test(config_file: str | None) -> None:
    """Check sharding, collectives, gradient sync and saving on the configured processes."""
    from accelify.selftest import plan_checks, run_checks

    with exit_on_error():
        plan = plan_checks(config_file)
        for warning in plan.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(plan.banner(), err=True)
        outcome = run_checks(plan)
    from accelify.cli.render import checks_table, console

    out = console()
    if outcome.checks:
        out.print(checks_table((c.name, c.passed, c.detail) for c in outcome.checks))
    if outcome.passed:
        out.print("[green]all checks passed[/]")
    else:
        failing = next((c.name for c in outcome.checks if not c.passed), None)
        if failing:
            out.print(f"[red]check failed: {failing}[/]")
        else:
            describe = outcome.launch.failure.describe() if outcome.launch.failure else "no report was written"
            out.print(f"[red]the check script did not finish:[/] {describe}")
    sys.exit(outcome.exit_code)
