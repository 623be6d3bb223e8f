"""rich presentation for the launch-side commands (config questionnaire, test table); nothing else uses rich."""

from __future__ import annotations

from typing import Iterable

from rich.console import Console
from rich.table import Table


def console(stderr: bool = False) -> Console:
    """A console on the current ``sys.stdout``/``sys.stderr`` (so CliRunner captures it)."""
    import sys

    return Console(file=sys.stderr if stderr else sys.stdout, highlight=False, soft_wrap=True)


def checks_table(rows: Iterable[tuple[str, bool, str]]) -> Table:
    """A table of ``(check, passed, detail)`` rows for ``accelify test``."""
    table = Table(title="accelify test", show_lines=False)
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for name, passed, detail in rows:
        table.add_row(name, "[green]passed[/]" if passed else "[red]FAILED[/]", detail)
    return table
