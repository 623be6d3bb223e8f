"""How ``accelify verify`` shows its report: a verdict table (rich), the verdict in words, and a hang's stacks.

Part of the console package; the library (``accelify.verify``) never prints.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from accelify.verify.report import FAILED, PASSED, VerifyReport

_STYLES = {PASSED: "green", FAILED: "bold red"}
STACK_LINES = 30  # lines of each hung process's stack shown


def verify_table(report: VerifyReport) -> Table:
    """One row per check: where it ran, its name, passed/FAILED/skipped, and what was measured."""
    options = report.options
    limit = options.limit
    table = Table(title=f"accelify verify {report.script} ({limit}, {options.processes} processes)",
                  title_justify="left", show_lines=False)
    table.add_column("stage", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for check in report.checks:
        result = Text("FAILED" if check.failed else check.status, style=_STYLES.get(check.status, "yellow"))
        table.add_row(check.stage, check.name, result, Text(check.detail))
    return table


def print_verify_report(console: Console, report: VerifyReport) -> None:
    """The table, then the verdict (the first failing check and what it means), then any hung process's stack."""
    console.print(verify_table(report))
    failure = report.first_failure
    if failure is None:
        style = "bold green" if report.passed else "yellow"
        console.print(Text(report.verdict, style=style), markup=False)
        return
    console.print(Text(f"FAILED: {failure.name}: {failure.detail}", style="bold red"), markup=False)
    if failure.meaning:
        console.print(Text(f"What it means: {failure.meaning}."), markup=False)
    for rank, stack in failure.stacks:
        console.print(Text(f"Python stack of process {rank} when it was ended:", style="bold"), markup=False)
        lines = stack.rstrip().splitlines()
        shown = lines[:STACK_LINES]
        if len(lines) > STACK_LINES:
            shown.append(f"  ... {len(lines) - STACK_LINES} more lines")
        console.print(Text("\n".join(shown)), markup=False)
