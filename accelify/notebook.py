"""Jupyter notebooks as programs: the code cells joined into one, the converted program cut back into its cells.

A notebook runs its cells in one Python process, top to bottom, so its code cells are analysed as
one program in cell order (``Notebook.open``: their text joined, each cell after a marker comment;
``accelify.pipeline.convert_notebook_text`` converts it and ``Notebook.close`` cuts it back). IPython syntax is never parsed as Python: a line magic (``%matplotlib inline``), a shell
escape (``!pip install ...``, ``files = !ls``), a help request (``model?``) becomes a placeholder
comment and comes back as it was (:mod:`accelify.ipython_lines`); a cell magic (``%%bash``) keeps its whole cell out of the program,
except the magics whose body is Python (``%%time``, ``%%capture``...). The converted program is
cut back at the markers; a cell whose text did not change keeps its source exactly, outputs and
metadata are never touched, and the JSON is written back with the notebook's own indentation.

Since the cells run in the notebook's process, training on N processes goes through
``notebook_launcher``: where the conversion put the ``Accelerator`` in a function the notebook then
calls (``main()`` in the last cell), that call becomes ``notebook_launcher(main, ())``, which on one
process calls it here exactly as before (and on a machine with N GPUs runs it on each). Where the
training runs in the cells themselves, or the call cannot be launched as it is, the conversion warns
with the fix (``ACC101``, ``ACC102``): the engine's notebook step, ``codemods/engine/notebook_launch.py``.
Nothing here converts code.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

from accelify.codemods.engine.outcome import CONVERTED, FAILED, NOT_A_CANDIDATE, SKIPPED, UNCHANGED, ConversionWarning
from accelify.errors import SourceError
from accelify.ipython_lines import MAGIC_LINE as _MAGIC_LINE
from accelify.ipython_lines import PYTHON_CELL_MAGICS
from accelify.ipython_lines import mask as _mask
from accelify.ipython_lines import unmask as _unmask
from accelify.results import Result

_CELL = "# @@accelify-cell-{}@@"
_CELL_LINE = re.compile(r"^# @@accelify-cell-(\d+)@@$", re.MULTILINE)


@dataclass
class _Program:
    """The code cells joined: the text, the placeholders' original lines, which cells took part."""

    text: str
    magics: dict[int, str]
    cells: list[int]  # notebook indices of the code cells in the program, in order


def _source_text(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _check_cell(masked: str, path: str, number: int) -> str | None:
    """Python's own message for a cell that does not parse (``path:cell_N:line:col: syntax error: ...``)."""
    try:
        compile(masked, f"{path}:cell_{number}", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as error:
        return f"{path}:cell_{number}:{error.lineno or 1}:{error.offset or 1}: syntax error: {error.msg}"
    except (ValueError, RecursionError) as error:
        return f"{path}:cell_{number}: cannot be parsed: {error}"
    return None


def _join(cells: Sequence[dict[str, Any]], path: str) -> _Program | str:
    """The program of the code cells, or the error of the first cell that does not parse."""
    parts: list[str] = []
    magics: dict[int, str] = {}
    order: list[int] = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = _source_text(cell)
        first = source.lstrip().split(None, 1)[0] if source.strip() else ""
        order.append(index)
        parts.append(_CELL.format(index) + "\n")
        if first.startswith("%%") and first not in PYTHON_CELL_MAGICS:
            continue  # %%bash, %%html...: not Python, not part of the program
        masked = _mask(source, magics)
        error = _check_cell(masked, path, index + 1)
        if error is not None:
            return error
        parts.append(masked if masked.endswith("\n") or not masked else masked + "\n")
    return _Program("".join(parts), magics, order)


def _split(text: str, program: _Program) -> dict[int, str] | None:
    """The converted program cut back into cells (notebook index -> text), or None when the conversion
    moved code across a cell boundary (a marker missing, moved or out of order)."""
    found = list(_CELL_LINE.finditer(text))
    if [int(f.group(1)) for f in found] != program.cells:
        return None
    head = text[: found[0].start()] if found else ""
    cells: dict[int, str] = {}
    for i, marker in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        body = text[marker.end() + 1 : end]
        cells[int(marker.group(1))] = (head + body) if i == 0 else body
    return cells


def _cell_source(old: Any, text: str) -> Any:
    """``text`` in the shape the notebook stores a cell's source in (a list of lines, or a string)."""
    if isinstance(old, list):
        return text.splitlines(keepends=True)
    return text


@dataclass(frozen=True)
class JsonStyle:
    """How a notebook's JSON is laid out, so that it is written back the same way."""

    indent: int | str | None = 1
    ensure_ascii: bool = False
    newline: bool = True
    compact: bool = False

    @classmethod
    def of(cls, text: str) -> "JsonStyle":
        match = re.search(r"\n([ \t]+)\S", text)
        indent: int | str | None = None
        if match:
            space = match.group(1)
            indent = len(space) if set(space) == {" "} else space
        ascii_only = text.isascii() and re.search(r"\\u[0-9a-fA-F]{4}", text) is not None
        compact = indent is None and '": ' not in text[:2000]
        return cls(indent, ascii_only, text.endswith("\n"), compact)

    def dumps(self, data: Any) -> str:
        separators = (",", ":") if self.compact else None
        text = json.dumps(data, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=separators)
        return text + "\n" if self.newline else text


def _cell_of(program_text: str, line: int) -> tuple[int, int]:
    """(notebook index, line in the cell) of a line of a joined program."""
    index, start = 0, 0
    for number, text in enumerate(program_text.split("\n"), start=1):
        if number > line:
            break
        match = _CELL_LINE.match(text)
        if match:
            index, start = int(match.group(1)), number
    return index, max(line - start, 1)


def _in_cells(warnings: Sequence[ConversionWarning], program_text: str, path: str) -> tuple[ConversionWarning, ...]:
    """Warnings located in the joined program, re-located as ``path:cell_N`` and the line in that cell."""
    out = []
    for warning in warnings:
        index, line = _cell_of(program_text, warning.line)
        out.append(replace(warning, path=f"{path}:cell_{index + 1}", line=line))
    return tuple(out)


def read_notebook(path: str) -> tuple[str, str]:
    """The text of a notebook file and its encoding (UTF-8, with or without a byte-order mark)."""
    try:
        data = open(path, "rb").read()
    except FileNotFoundError:
        raise SourceError(path, "does not exist", "check the path") from None
    except IsADirectoryError:
        raise SourceError(path, "is a directory", "pass the notebooks in it, or the directory to `accelify migrate`") from None
    except OSError as error:
        raise SourceError(path, f"cannot be read: {error.strerror}", "check its permissions") from None
    encoding = "utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8"
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as error:
        raise SourceError(path, f"is not UTF-8 ({error})", "a notebook is UTF-8 JSON: re-save it from Jupyter") from None


class Notebook:
    """A notebook opened for conversion: its JSON, its code cells joined as one program (``text``), and how to
    cut a converted program back into the cells (``close``). ``open`` returns a finished ``Result`` instead when
    the notebook is nothing to convert (not JSON, not Python, no torch)."""

    def __init__(self, path: str, text: str, encoding: str, data: dict[str, Any], program: _Program) -> None:
        self.path = path
        self.json = text
        self.encoding = encoding
        self.data = data
        self.program = program

    @property
    def text(self) -> str:
        """The program to convert: the code cells in order, each after a marker line."""
        return self.program.text

    @classmethod
    def open(cls, text: str, *, path: str = "<notebook>", encoding: str = "utf-8") -> "Notebook | Result":
        def done(status: str, **fields: Any) -> Result:
            return Result(path, status, text, text, encoding=encoding, **fields)

        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            return done(FAILED, error=f"{path}:{error.lineno}:{error.colno}: not valid notebook JSON: {error.msg}")
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            if isinstance(data, dict) and "worksheets" in data:
                return done(SKIPPED, reason="an nbformat 3 notebook: upgrade it (`jupyter nbconvert --to notebook "
                            "--nbformat 4`) to convert it")
            return done(FAILED, error=f"{path}: not a Jupyter notebook (no list of cells)")
        language = (data.get("metadata", {}).get("kernelspec", {}).get("language")
                    or data.get("metadata", {}).get("language_info", {}).get("name") or "python")
        if str(language).lower() != "python":
            return done(SKIPPED, reason=f"a {language} notebook, not Python")
        program = _join(data["cells"], path)
        if isinstance(program, str):
            return done(FAILED, error=program)
        if not program.text.strip() or "torch" not in program.text:
            return done(SKIPPED, reason=NOT_A_CANDIDATE)
        return cls(path, text, encoding, data, program)

    def close(self, result: Result, notes: Sequence[ConversionWarning] = ()) -> Result:
        """The notebook's result from the program's: the converted program cut back into its cells, the warnings
        located in cells (``notes``: warnings positioned in the converted program, the notebook step's)."""
        path, text, encoding, program = self.path, self.json, self.encoding, self.program

        def done(status: str, **fields: Any) -> Result:
            return Result(path, status, text, text, encoding=encoding, **fields)

        if result.status == FAILED:
            return done(FAILED, error=result.error, detail=result.detail)
        new_program = result.new
        warnings = [*_in_cells(result.warnings, program.text, path), *_in_cells(notes, new_program, path)]
        cut = _split(new_program, program)
        if cut is None:
            return done(FAILED, error=f"{path}: the conversion would move code across cells; export the notebook "
                        "to a script (`jupyter nbconvert --to script`) and convert that")
        old_cut = _split(program.text, program)
        assert old_cut is not None
        magics = dict(program.magics)
        changed = False
        new_cells = []
        for index, cell in enumerate(self.data["cells"]):
            if index in cut and cut[index] != old_cut[index]:
                restored = _unmask(cut[index], magics)
                if restored is None:
                    return done(FAILED, error=f"{path}:cell_{index + 1}: internal error: an IPython line was lost")
                old_source = _source_text(cell)
                if not old_source.endswith("\n") and restored.endswith("\n"):
                    restored = restored[:-1]
                if restored != old_source:
                    cell = dict(cell, source=_cell_source(cell.get("source"), restored))
                    changed = True
            new_cells.append(cell)
        new_text = JsonStyle.of(text).dumps(dict(self.data, cells=new_cells)) if changed else text
        status = result.status
        if status == CONVERTED and not changed and not any(c.changed for c in result.companions):
            status = UNCHANGED
        return Result(
            path, status, text, new_text,
            changes=result.changes,
            warnings=tuple(sorted(warnings, key=lambda w: (_cell_number(w.path), w.line, w.col, w.code))),
            reason=result.reason,
            encoding=encoding,
            companions=result.companions,
        )


def _cell_number(path: str) -> int:
    return int(path.rsplit("_", 1)[1]) if ":cell_" in path else 0


def cell_sources(text: str) -> list[tuple[int, str, str]]:
    """``(cell number, cell type, source)`` of every cell of a notebook's JSON text (for diffs and reports);
    an empty list when it is not a notebook."""
    try:
        data = json.loads(text)
        return [(i + 1, c.get("cell_type", ""), _source_text(c)) for i, c in enumerate(data["cells"])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def notebook_diff(result: Result) -> str:
    """The unified diff of a converted notebook, cell by cell (``a/nb.ipynb:cell_3``), code only."""
    import difflib

    old, new = cell_sources(result.old), cell_sources(result.new)
    if len(old) != len(new):
        return ""
    relative = not result.path.startswith(("/", "<")) and ":" not in result.path[:3]
    out: list[str] = []
    for (number, _, before), (_, _, after) in zip(old, new):
        if before == after:
            continue
        before, after = (text if text.endswith("\n") else text + "\n" for text in (before, after))
        name = f"{result.path}:cell_{number}"
        lines = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            fromfile=f"a/{name}" if relative else name, tofile=f"b/{name}" if relative else name,
        )
        out.extend(lines)
    return "".join(out)


class NotebookProgramError(SourceError):
    """A notebook that cannot be run as a program (not JSON, not Python, a cell that does not parse)."""


def runnable_program(text: str, path: str = "<notebook>") -> tuple[str, tuple[str, ...]]:
    """The notebook's code cells as a program Python can run on its own (what ``accelify launch nb.ipynb`` and
    ``accelify verify nb.ipynb`` run), and the IPython lines it leaves out (``cell_N: line``).

    The cells run in order, as "Run all" would; an IPython line (``%matplotlib inline``, ``!pip install``,
    ``files = !ls``) becomes ``pass`` with the line kept in a comment, since plain Python cannot run it; a
    non-Python cell magic (``%%bash``) is left out whole. Raises :class:`NotebookProgramError`."""
    opened = Notebook.open(text, path=path)
    if isinstance(opened, Result):
        if opened.error:
            raise NotebookProgramError(path, opened.error.removeprefix(f"{path}:").strip(), "fix the notebook in Jupyter")
        raise NotebookProgramError(path, f"has nothing to run ({opened.reason})", "check that it is the right notebook")
    program = opened.program
    skipped: list[str] = []
    cells = {m.start(): int(m.group(1)) + 1 for m in _CELL_LINE.finditer(program.text)}
    out: list[str] = []
    cell = 0
    offset = 0
    for line in program.text.split("\n"):
        cell = cells.get(offset, cell)
        offset += len(line) + 1
        match = _MAGIC_LINE.match(line)
        if match is None:
            out.append(line)
            continue
        original = program.magics[int(match.group(2))]
        skipped.append(f"cell_{cell}: {original.strip()}")
        out.append(f"{match.group(1)}pass  # IPython, not run as a program: {original.strip()}")
    return "\n".join(out), tuple(skipped)
