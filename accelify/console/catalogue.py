"""How ``accelify rules`` and ``accelify rule KEY`` look: a table of rules and codes, one entry with its example."""

from __future__ import annotations

from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from accelify.catalogue import Entry


def print_catalogue(console: Console, codes: list[Entry], rules: list[Entry]) -> None:
    """Both tables: the warning codes, then the rules in the order they run."""
    for title, entries, head in (("Warning codes", codes, "code"), ("Rules (in the order they run)", rules, "rule")):
        table = Table(title=title, title_justify="left", show_lines=False)
        table.add_column(head, style="bold", no_wrap=True)
        table.add_column("what it means" if head == "code" else "what it does")
        for entry in entries:
            table.add_row(entry.key, Text(entry.summary))
        console.print(table)
    console.print(Text("Explain one: accelify rule ACC016 (or a rule's name: accelify rule prepare)"))


def print_entry(console: Console, entry: Entry) -> None:
    """One rule or code: its text, then its example (before and after, coloured as Python)."""
    console.print(Text(f"{entry.key}: {entry.summary}", style="bold"))
    for paragraph in entry.text[1:]:
        console.print()
        console.print(Text(paragraph))
    example = entry.example
    console.print()
    if example is None:
        console.print(Text("No example yet."))
        return
    for path, before, _ in example.module_texts:
        console.print(Text(f"{path}, a module the script imports:", style="bold"))
        console.print(Syntax(before.rstrip(), "python", theme="ansi_dark", background_color="default"))
    console.print(Text("Before:", style="bold"))
    console.print(Syntax(example.source.rstrip(), "python", theme="ansi_dark", background_color="default"))
    if example.after is None:
        reported = f" (reported: {', '.join(example.warnings)})" if example.warnings else ""
        console.print(Text(f"After: the file is left unchanged{reported}.", style="bold"))
        return
    console.print(Text("After:", style="bold"))
    console.print(Syntax(example.expected.rstrip(), "python", theme="ansi_dark", background_color="default"))
    if example.warnings:
        console.print(Text(f"Reported: {', '.join(example.warnings)} (code:line)."))
    for path, before, after in example.module_texts:
        if after != before:
            console.print(Text(f"{path} after:", style="bold"))
            console.print(Syntax(after.rstrip(), "python", theme="ansi_dark", background_color="default"))
