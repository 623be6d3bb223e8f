"""The reports of a batch run: JSON for machines (``--report``), one HTML page for reviewers (``--html``).

The JSON schema (``SCHEMA``) is documented in the README ("The migrate report"). The HTML page is
self-contained (inline CSS, no script, nothing fetched): the summary, then per file the side-by-side
diff (a notebook: cell by cell), each warning in a row right below the line it is about. Both are
fed one result at a time; the HTML keeps each file's part in a temporary file until the end, so a
run over thousands of files does not hold their texts in memory.
"""

from __future__ import annotations

import difflib
import html
import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from itertools import zip_longest
from typing import TYPE_CHECKING, Iterable, Sequence

from accelify import __version__
from accelify.codemods.engine.outcome import ATTENTION, CONVERTED, FAILED, SKIPPED, STATUSES, UNCHANGED, ConversionWarning
from accelify.results import Result

if TYPE_CHECKING:
    from accelify.migrate.migration import Row, Summary

SCHEMA = "accelify-migrate-report/1"
CONTEXT = 3  # unchanged lines shown around a change or a warning
LABELS = {CONVERTED: "converted", UNCHANGED: "unchanged", ATTENTION: "needs attention", SKIPPED: "skipped", FAILED: "failed"}


def payload(summary: "Summary", *, root: str, mode: str, exit_code: int, jobs: int) -> dict[str, object]:
    """The JSON report of a run."""
    counts = summary.counts
    return {
        "schema": SCHEMA,
        "tool": {"name": "accelify", "version": __version__},
        "root": root,
        "mode": mode,
        "jobs": jobs,
        "exit_code": exit_code,
        "totals": {
            "files": len(summary.rows),
            **{status: counts[status] for status in STATUSES},
            "warnings": sum(len(r.warnings) for r in summary.rows),
            "not_candidates": summary.not_candidates,
            "excluded": summary.excluded,
            "written": len(summary.written),
            "copied": summary.copied,
        },
        "files": [row.to_json() for row in summary.rows],
    }


# -- HTML -------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;color:#1f2328;background:#fff}
h1{font-size:1.5em}h2{font-size:1.1em;margin:2em 0 .4em;font-family:ui-monospace,monospace}
table{border-collapse:collapse}.totals td,.totals th,.files td,.files th{padding:.25em .8em;border-bottom:1px solid #d0d7de;text-align:left}
.badge{display:inline-block;padding:0 .5em;border-radius:1em;font-size:.85em;font-family:system-ui,sans-serif}
.converted{background:#dafbe1}.unchanged{background:#eaeef2}.attention{background:#fff8c5}.skipped{background:#eaeef2}.failed{background:#ffebe9}
.diff{width:100%;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;table-layout:fixed;border:1px solid #d0d7de}
.diff td{vertical-align:top;padding:0 .5em;white-space:pre-wrap;word-break:break-all}
.diff td.n{width:3.5em;color:#6e7781;text-align:right;user-select:none;background:#f6f8fa}
.diff tr.cell td{background:#ddf4ff;font-weight:bold}
.del{background:#ffebe9}.add{background:#dafbe1}.gap td{color:#6e7781;background:#f6f8fa;text-align:center}
.warn td{background:#fff8c5;white-space:normal;font-family:system-ui,sans-serif}
.error{background:#ffebe9;padding:.5em;font-family:ui-monospace,monospace;white-space:pre-wrap}
.changes{color:#57606a;margin:.2em 0 .6em}
"""


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _anchor(path: str) -> str:
    return "f-" + "".join(c if c.isalnum() else "-" for c in path)


def _warning_row(warning: ConversionWarning) -> str:
    return (f'<tr class="warn"><td class="n"></td><td colspan="3">&#9888; <b>{_esc(warning.code)}</b> '
            f"line {warning.line}:{warning.col}: {_esc(warning.message)}<br><i>Fix:</i> {_esc(warning.fix)}</td></tr>")


def _side_by_side(old: str, new: str, warnings: Sequence[ConversionWarning]) -> list[str]:
    """Table rows: the changed lines side by side with a few lines of context, each warning below
    the (original) line it names; long unchanged stretches are folded."""
    a, b = old.splitlines(), new.splitlines()
    by_line: dict[int, list[ConversionWarning]] = defaultdict(list)
    for warning in warnings:
        by_line[min(max(warning.line, 1), max(len(a), 1))].append(warning)
    shown: set[int] = set()  # old line numbers (1-based) to show in equal stretches
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    for tag, i1, i2, _, _ in opcodes:
        if tag != "equal":
            shown.update(range(max(1, i1 - CONTEXT + 1), i2 + CONTEXT + 1))
    for line in by_line:
        shown.update(range(line - CONTEXT + 1, line + CONTEXT))
    rows: list[str] = []

    def line_row(i: int | None, j: int | None, cls_old: str = "", cls_new: str = "") -> None:
        left = _esc(a[i]) if i is not None else ""
        right = _esc(b[j]) if j is not None else ""
        rows.append(f'<tr><td class="n">{"" if i is None else i + 1}</td><td class="{cls_old}">{left}</td>'
                    f'<td class="n">{"" if j is None else j + 1}</td><td class="{cls_new}">{right}</td></tr>')
        if i is not None:
            rows.extend(_warning_row(w) for w in by_line.pop(i + 1, ()))

    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            gap = 0
            for k in range(i2 - i1):
                if i1 + k + 1 in shown:
                    if gap:
                        rows.append(f'<tr class="gap"><td colspan="4">&#8942; {gap} unchanged line{"s" if gap > 1 else ""}</td></tr>')
                        gap = 0
                    line_row(i1 + k, j1 + k)
                else:
                    gap += 1
            if gap:
                rows.append(f'<tr class="gap"><td colspan="4">&#8942; {gap} unchanged line{"s" if gap > 1 else ""}</td></tr>')
        else:
            for i, j in zip_longest(range(i1, i2), range(j1, j2)):
                line_row(i, j, "del" if i is not None else "", "add" if j is not None else "")
    for remaining in by_line.values():  # a warning past the end of the text
        rows.extend(_warning_row(w) for w in remaining)
    return rows


def _pairs(result: Result) -> list[tuple[str, str, str, list[ConversionWarning]]]:
    """``(heading, old, new, warnings)`` per part of a file: the file itself, or each notebook cell that
    changed or has warnings."""
    if not result.path.endswith(".ipynb"):
        return [("", result.old, result.new, list(result.warnings))]
    from accelify.notebook import cell_sources

    old, new = cell_sources(result.old), cell_sources(result.new)
    by_cell: dict[str, list[ConversionWarning]] = defaultdict(list)
    for warning in result.warnings:
        by_cell[warning.path.rsplit(":", 1)[-1]].append(warning)
    out = []
    for (number, kind, before), (_, _, after) in zip(old, new or old):
        found = by_cell.pop(f"cell_{number}", [])
        if kind == "code" and (before != after or found):
            out.append((f"cell {number}", before, after, found))
    leftover = [w for ws in by_cell.values() for w in ws]
    if leftover or not out:
        out.append(("", "", "", leftover))
    return out


def file_section(result: Result, *, companion_of: str | None = None) -> str:
    """The HTML part for one file: heading, changes, the side-by-side diff or the error."""
    status = result.status
    parts = [f'<section id="{_anchor(result.path)}"><h2>{_esc(result.path)} '
             f'<span class="badge {status}">{LABELS.get(status, status)}</span></h2>']
    if companion_of:
        parts.append(f'<p class="changes">converted with {_esc(companion_of)}</p>')
    if result.reason and status in (ATTENTION, SKIPPED):
        parts.append(f'<p class="changes">{_esc(result.reason)}</p>')
    if result.changes:
        parts.append(f'<p class="changes">{_esc("; ".join(result.changes))}</p>')
    if result.error:
        parts.append(f'<div class="error">{_esc(result.error)}</div>')
    for heading, old, new, warnings in _pairs(result):
        if old == new and not warnings:
            continue
        rows = _side_by_side(old, new, warnings)
        if heading:
            rows.insert(0, f'<tr class="cell"><td colspan="4">{_esc(heading)}</td></tr>')
        parts.append('<table class="diff"><colgroup><col style="width:3.5em"><col><col style="width:3.5em"><col>'
                     "</colgroup>" + "".join(rows) + "</table>")
    parts.append("</section>")
    return "\n".join(parts)


@dataclass
class _Part:
    path: str
    offset: int
    length: int


class HtmlReport:
    """``add`` each result as it comes (its part goes to a temporary file); ``write`` the page at the end."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile("w+b")
        self._parts: list[_Part] = []

    def add(self, result: Result, *, companion_of: str | None = None) -> None:
        if result.status == SKIPPED and not result.warnings:
            return
        if result.status == UNCHANGED and not result.warnings:
            return
        data = file_section(result, companion_of=companion_of).encode("utf-8")
        self._file.seek(0, os.SEEK_END)
        self._parts.append(_Part(result.path, self._file.tell(), len(data)))
        self._file.write(data)
        for companion in result.companions:
            self.add(companion, companion_of=result.path)

    def write(self, path: str | os.PathLike[str], summary: "Summary", *, title: str, command: str) -> None:
        """Write the page atomically: summary, the table of files, then each file's part (sorted by path)."""
        from accelify.source import write_atomic

        head = _head(summary, title=title, command=command, detailed={p.path for p in self._parts})
        chunks = [head.encode("utf-8")]
        for part in sorted(self._parts, key=lambda p: p.path):
            self._file.seek(part.offset)
            chunks.append(self._file.read(part.length))
            chunks.append(b"\n")
        chunks.append(b"</body></html>\n")
        write_atomic(path, b"".join(chunks))
        self._file.close()


def _head(summary: "Summary", *, title: str, command: str, detailed: set[str]) -> str:
    counts = summary.counts
    totals = "".join(
        f'<tr><th><span class="badge {s}">{LABELS[s]}</span></th><td>{counts[s]}</td></tr>' for s in STATUSES
    )
    totals += (f"<tr><th>warnings</th><td>{sum(len(r.warnings) for r in summary.rows)}</td></tr>"
               f"<tr><th>other files (no torch import)</th><td>{summary.not_candidates}</td></tr>")
    if summary.excluded:
        totals += f"<tr><th>excluded by the settings</th><td>{summary.excluded}</td></tr>"
    rows = []
    for row in summary.rows:
        name = _esc(row.path)
        if row.path in detailed:
            name = f'<a href="#{_anchor(row.path)}">{name}</a>'
        note = row.error or row.reason or ("; ".join(row.changes) if row.changes else "")
        if row.companion_of and not note:
            note = f"converted with {row.companion_of}"
        rows.append(f'<tr><td>{name}</td><td><span class="badge {row.status}">{LABELS.get(row.status, row.status)}'
                    f"</span></td><td>{len(row.warnings) or ''}</td><td>{_esc(note)}</td></tr>")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n<h1>{_esc(title)}</h1>\n"
        f'<p><code>{_esc(command)}</code> &middot; accelify {__version__}</p>\n'
        f'<table class="totals">{totals}</table>\n<h2>Files</h2>\n'
        f'<table class="files"><tr><th>file</th><th>status</th><th>warnings</th><th>first reason / changes</th></tr>'
        + "".join(rows) + "</table>\n"
    )


def first_reason(row: "Row") -> str:
    """What the table says about a file that was not simply converted."""
    if row.error:
        return row.error
    if row.reason:
        return row.reason
    return row.warnings[0].format() if row.warnings else ""


def rows_needing_a_look(rows: Iterable["Row"]) -> list["Row"]:
    return [r for r in rows if r.status in (ATTENTION, FAILED, SKIPPED)]
