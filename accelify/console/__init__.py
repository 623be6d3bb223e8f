"""Everything the tool shows a person: coloured unified diffs, warnings, errors and a summary (convert);
the config questionnaire's prompts and ``accelify test``'s table (the launch side).

The one module that uses rich. Colours appear only on a terminal; piped output is plain text.
"""

from __future__ import annotations

import difflib
import json
import os
from collections import Counter
from typing import Iterable, Sequence, TextIO

from rich.console import Console
from rich.prompt import Confirm, IntPrompt, Prompt
from rich.table import Table
from rich.text import Text

from accelify.codemods.engine.outcome import ATTENTION, CONVERTED, FAILED, SKIPPED, UNCHANGED
from accelify.results import Result

_DIFF_STYLES = (("+++", "bold"), ("---", "bold"), ("@@", "cyan"), ("+", "green"), ("-", "red"))


def make_console(file: TextIO | None = None, *, stderr: bool = False) -> Console:
    """A console that never wraps, highlights or interprets markup in what it prints."""
    plain = bool(os.environ.get("NO_COLOR"))  # no-color.org: no colour, and no bold or underline either
    return Console(file=file, stderr=stderr, highlight=False, soft_wrap=True, emoji=False,
                   color_system=None if plain else "auto")


def unified_diff(result: Result) -> str:
    """The unified diff from ``result.old`` to ``result.new`` (empty when nothing changed); a notebook's
    is the diff of its code cells (``accelify.notebook.notebook_diff``)."""
    if result.old == result.new:
        return ""
    if result.path.endswith(".ipynb"):
        from accelify.notebook import notebook_diff

        return notebook_diff(result)
    relative = not result.path.startswith(("/", "<")) and ":" not in result.path[:3]
    lines = difflib.unified_diff(
        result.old.splitlines(keepends=True),
        result.new.splitlines(keepends=True),
        fromfile=f"a/{result.path}" if relative else result.path,
        tofile=f"b/{result.path}" if relative else result.path,
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def print_diff(console: Console, result: Result) -> None:
    """Print ``result``'s diff, coloured line by line on a terminal. Elsewhere the text is written as
    is, so that ``accelify convert x.py > x.diff`` gives a patch that applies (rich would expand tabs)."""
    diff = unified_diff(result)
    if not console.is_terminal:
        console.file.write(diff)
        return
    for line in diff.splitlines(keepends=True):
        style = next((s for prefix, s in _DIFF_STYLES if line.startswith(prefix)), "")
        console.print(Text(line, style=style), end="", markup=False)


def print_warnings(console: Console, results: Iterable[Result]) -> None:
    """One ``path:line:col: ACCnnn message (fix)`` line per warning (local modules converted with a
    script included)."""
    for result in results:
        for part in (result, *result.companions):
            for warning in part.warnings:
                console.print(Text(warning.format(), style="yellow"), markup=False)


def print_warnings_grouped(console: Console, results: Iterable[Result], *, repeated: int = 3, shown: int = 3) -> None:
    """Like :func:`print_warnings`, but a warning (same code and message) reported in ``repeated`` files or more is
    shown once, with its count and its first ``shown`` places (``accelify migrate`` over a large tree)."""
    every = [w for result in results for part in (result, *result.companions) for w in part.warnings]
    groups: dict[tuple[str, str, str], list] = {}
    for warning in every:
        groups.setdefault((warning.code, warning.message, warning.fix), []).append(warning)
    for warning in every:
        group = groups.get((warning.code, warning.message, warning.fix))
        if group is None:
            continue  # already shown with its group
        if len({w.path for w in group}) < repeated:
            console.print(Text(warning.format(), style="yellow"), markup=False)
            continue
        del groups[(warning.code, warning.message, warning.fix)]
        places = ", ".join(f"{w.path}:{w.line}" for w in group[:shown])
        more = f" and {len(group) - shown} more" if len(group) > shown else ""
        files = len({w.path for w in group})
        console.print(Text(f"{warning.code} {warning.message} ({warning.fix}): {len(group)} times in {files} files: "
                           f"{places}{more}", style="yellow"), markup=False)


def print_errors(console: Console, results: Iterable[Result], *, verbose: bool = False) -> None:
    """The error of every failed file (with its traceback when ``verbose`` and one was kept)."""
    for result in results:
        if not result.failed:
            continue
        console.print(Text(f"error: {result.error}", style="bold red"), markup=False)
        if verbose and result.detail:
            console.print(Text(result.detail.rstrip(), style="red"), markup=False)


def print_written(console: Console, written: Sequence[tuple[Result, str]]) -> None:
    """``converted path -> destination`` for every file written."""
    for result, destination in written:
        arrow = "" if destination == result.path else f" -> {destination}"
        console.print(Text(f"{result.status}: {result.path}{arrow}", style="green" if result.changed else ""), markup=False)


def print_skipped(console: Console, results: Iterable[Result]) -> None:
    """``path: skipped: reason`` for every file that was left alone on purpose, and ``path: needs
    attention: reason (not written)`` for every file the tool refused to convert."""
    for result in results:
        if result.status == SKIPPED:
            console.print(Text(f"{result.path}: skipped: {result.reason}", style="yellow"), markup=False)
        elif result.needs_attention:
            console.print(
                Text(f"{result.path}: needs attention, not converted: {result.reason} (see the warnings above)",
                     style="bold yellow"),
                markup=False,
            )


def print_interrupted(console: Console, written: Sequence[tuple[Result, str]]) -> None:
    """After Ctrl-C: which files were already written (each one whole); nothing else was touched."""
    if not written:
        console.print(Text("interrupted: nothing was written", style="bold red"), markup=False)
        return
    count = len(written)
    console.print(
        Text(f"interrupted: {count} file{'s' if count != 1 else ''} had been written (each one whole), "
             "no other file was touched:", style="bold red"),
        markup=False,
    )
    for _, destination in written:
        console.print(Text(f"  {destination}"), markup=False)


def summary_line(results: Sequence[Result], *, would: bool) -> str:
    """``2 files would be converted, 1 needs attention, 1 unchanged, 1 failed; 3 warnings``; a script's modules
    the conversion rewrote (``engine.py`` beside ``train.py``) are counted with it."""
    counts = Counter(r.status for r in results)
    counts[CONVERTED] += sum(c.status == CONVERTED for r in results for c in r.companions)  # modules it rewrote too
    verb = "would be converted" if would else "converted"
    parts = [f"{counts[CONVERTED]} file{'s' if counts[CONVERTED] != 1 else ''} {verb}"]
    if counts[ATTENTION]:
        parts.append(f"{counts[ATTENTION]} need{'s' if counts[ATTENTION] == 1 else ''} attention")
    parts += [f"{counts[s]} {s}" for s in (UNCHANGED, SKIPPED, FAILED) if counts[s]]
    warnings = sum(len(part.warnings) for r in results for part in (r, *r.companions))  # every module shown
    text = ", ".join(parts)
    return f"{text}; {warnings} warning{'s' if warnings != 1 else ''}" if warnings else text


def print_summary(console: Console, results: Sequence[Result], *, would: bool) -> None:
    console.print(Text(summary_line(results, would=would), style="bold"), markup=False)


def print_json(file: TextIO, results: Sequence[Result]) -> None:
    """The results as a JSON list, with each converted file's diff."""
    payload = [r.to_json() | {"diff": unified_diff(r)} for r in results]
    file.write(json.dumps(payload, indent=2) + "\n")


# ---------------------------------------------------------------- the launch side: config and test
class Questionnaire:
    """``accelify config``'s questions and notes on the current stdout (so CliRunner captures them).

    Each ``ask*`` re-asks until the answer has the right form; Enter accepts the default.
    """

    def __init__(self) -> None:
        import sys

        self.console = Console(file=sys.stdout, highlight=False, soft_wrap=True)

    def title(self, text: str) -> None:
        self.console.print(Text(text, style="bold"))

    def note(self, text: str) -> None:
        """Something to know about the answers (shown in yellow)."""
        self.console.print(Text(text, style="yellow"))

    def problem(self, text: str) -> None:
        """Why an answer was not taken (shown in red); the question is asked again."""
        self.console.print(Text(text, style="red"))

    def confirm(self, question: str, default: bool) -> bool:
        return Confirm.ask(question, default=default, console=self.console)

    def ask(self, question: str, default: str | None = None, choices: Sequence[str] | None = None) -> str:
        extra = {} if default is None else {"default": default}
        return Prompt.ask(question, choices=list(choices) if choices else None, console=self.console, **extra)

    def ask_int(self, question: str, default: int) -> int:
        return IntPrompt.ask(question, default=default, console=self.console)


def print_checks(rows: Iterable[tuple[str, bool, str]], *, passed: bool, failing: str | None, failure: str) -> None:
    """``accelify test``'s table of ``(check, passed, detail)`` rows on stdout, then the verdict: all passed,
    the first failing check, or (no check failed but the run did) ``failure``."""
    import sys

    out = Console(file=sys.stdout, highlight=False, soft_wrap=True)
    rows = list(rows)
    if rows:
        table = Table(title="accelify test", show_lines=False)
        table.add_column("check")
        table.add_column("result")
        table.add_column("detail", overflow="fold")
        for name, ok, detail in rows:
            table.add_row(Text(name), Text("passed", style="green") if ok else Text("FAILED", style="red"), Text(detail))
        out.print(table)
    if passed:
        out.print(Text("all checks passed", style="green"))
    elif failing:
        out.print(Text(f"check failed: {failing}", style="red"))
    else:
        out.print(Text.assemble(("the check script did not finish:", "red"), f" {failure}"))


# ---------------------------------------------------------------------------------------------------
# accelify migrate: the progress bar, the summary tables, the interrupted message.
# (A section of its own; the functions at the top are shared with `convert`.)
# ---------------------------------------------------------------------------------------------------

import contextlib  # noqa: E402
from typing import TYPE_CHECKING, Callable, Iterator  # noqa: E402


if TYPE_CHECKING:
    from accelify.migrate.migration import Summary

MIGRATE_LABELS = (
    (CONVERTED, "converted", "green"),
    (UNCHANGED, "unchanged", ""),
    (ATTENTION, "needs attention", "yellow"),
    (SKIPPED, "skipped", ""),
    (FAILED, "failed", "red"),
)


@contextlib.contextmanager
def migrate_progress(console: Console, total: int) -> Iterator[Callable[[int, str], None]]:
    """A progress bar over ``total`` files on a terminal (nothing elsewhere); yields ``advance(n, path)``."""
    if not console.is_terminal or total == 0:
        yield lambda n, label: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("converting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}", style="dim"))
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("", total=total)
        yield lambda n, label: bar.update(task, advance=n, description=label)


def print_migrate_summary(console: Console, summary: "Summary", *, would: bool, limit: int = 200,
                          quiet: bool = False) -> None:
    """The counts by status, then one row per file that needs a look (attention, failed, skipped) with
    its first reason; ``quiet``: only those files, one plain line each."""
    from accelify.migrate.report import first_reason, rows_needing_a_look

    if quiet:
        labels = {status: label for status, label, _ in MIGRATE_LABELS}
        for row in rows_needing_a_look(summary.rows)[:limit]:
            console.print(f"{row.path}: {labels[row.status]}: {first_reason(row)}", markup=False)
        return
    counts = summary.counts
    totals = Table(title="accelify migrate", title_justify="left", show_header=False, box=None, pad_edge=False)
    totals.add_column("status")
    totals.add_column("files", justify="right")
    for status, label, style in MIGRATE_LABELS:
        if status == CONVERTED and would:
            label = "would be converted"
        totals.add_row(Text(label, style=style if counts[status] else ""), str(counts[status]))
    totals.add_row(Text("other files (no torch import)", style="dim"), str(summary.not_candidates))
    if summary.excluded:
        totals.add_row(Text("excluded by the settings", style="dim"), str(summary.excluded))
    warnings = sum(len(r.warnings) for r in summary.rows)
    totals.add_row(Text("warnings", style="dim"), str(warnings))
    console.print(totals)
    look = rows_needing_a_look(summary.rows)
    if not look:
        return
    table = Table(show_lines=False, title="files that need a look", title_justify="left")
    table.add_column("file", overflow="fold")
    table.add_column("status")
    table.add_column("first reason", overflow="fold")
    styles = {status: style for status, _, style in MIGRATE_LABELS}
    labels = {status: label for status, label, _ in MIGRATE_LABELS}
    for row in look[:limit]:
        table.add_row(Text(row.path), Text(labels[row.status], style=styles[row.status]), Text(first_reason(row)))
    console.print(table)
    if len(look) > limit:
        console.print(Text(f"... and {len(look) - limit} more (see --report / --html)", style="dim"), markup=False)


def print_migrate_written(console: Console, written: Sequence[str], copied: int, *, interrupted: bool) -> None:
    """What a run wrote; after Ctrl-C, which files were already written (each one whole)."""
    if interrupted:
        head = (f"interrupted: {len(written)} converted file{'s' if len(written) != 1 else ''} had been written "
                f"(each one whole)" + (f" and {copied} copied" if copied else "") + "; no other file was touched"
                + (":" if written else ""))
        console.print(Text(head, style="bold red"), markup=False)
    for destination in written:
        console.print(Text(f"  {destination}" if interrupted else f"written: {destination}"), markup=False)


def print_notes(console: Console, notes: Iterable[str]) -> None:
    """Messages about the settings files (unknown keys)."""
    for note in dict.fromkeys(notes):
        console.print(Text(f"warning: {note}", style="yellow"), markup=False)
