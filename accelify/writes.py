"""Which files a run writes, decided once for ``convert`` and ``migrate``: ``plan_writes``.

A script's result goes out with the local modules its conversion changed (its companions), as one change. Two
things can make that impossible, and each fails that one script (its result becomes ``failed`` with the reason;
nothing of it is written) while the others go on:

- two scripts change a module they share, differently: the first one's conversion is written, the second fails;
- a companion would be written over its own original while the script goes elsewhere (``convert -o out.py``).

A part that an earlier script of the run already wrote, with the same text, is not written again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from accelify.codemods.engine.outcome import FAILED
from accelify.results import Result
from accelify.source import encode

if TYPE_CHECKING:
    from accelify.program import ModuleText

# Where a part of a script's result (the script, or one of its companions) is written, or None: not written.
Destination = Callable[[Result], "str | os.PathLike[str] | None"]


@dataclass(frozen=True)
class Write:
    """One file to write: where, the bytes, and the result it comes from."""

    destination: str
    data: bytes
    part: Result


@dataclass(frozen=True)
class PlannedWrite:
    """One script's result as the run reports it (``failed`` when its writes conflict), and the files to write
    for it, together (empty: nothing to write)."""

    result: Result
    files: tuple[Write, ...] = ()


def plan_writes(results: Iterable[tuple[Result, Destination]]) -> Iterator[PlannedWrite]:
    """For each script's result, in order, with where its parts go: what to write, or the conflict as a failed
    result. Lazy: each result is planned when the caller asks for it (after writing the previous one)."""
    chosen: dict[str, tuple[bytes, str]] = {}  # destination (resolved) -> (bytes, the script that writes them)
    for result, destination in results:
        if result.failed or result.needs_attention:
            yield PlannedWrite(result)
            continue
        script_to = destination(result)
        files: list[Write] = []
        conflict: str | None = None
        for part in (result, *(c for c in result.companions if c.changed)):
            where = destination(part) if part is not result else script_to
            if where is None:
                continue
            key = os.path.realpath(where)
            data = encode(part.new, part.encoding)
            if part is not result and key == os.path.realpath(part.path) and (
                script_to is None or os.path.realpath(script_to) != os.path.realpath(result.path)
            ):
                conflict = (f"{os.fspath(where)}: cannot write: converting {result.path} changes this local module too, and "
                            "-o would write the conversion over the original; write the program to a folder of its own "
                            "(-o OUT_DIR/) or use --in-place")
                break
            if key in chosen:
                if chosen[key][0] != data:
                    conflict = (f"{result.path}: its conversion edits {part.path} differently from the conversion of "
                                f"{chosen[key][1]}; convert them one at a time (`accelify convert {result.path}`)")
                    break
                continue  # written already, with an earlier script
            files.append(Write(os.fspath(where), data, part))
        if conflict is not None:
            yield PlannedWrite(replace(result, status=FAILED, new=result.old, companions=(), error=conflict))
            continue
        for write in files:
            chosen[os.path.realpath(write.destination)] = (write.data, result.path)
        yield PlannedWrite(result, tuple(files))


def program_modules(result: Result) -> "list[ModuleText]":
    """The local modules ``result``'s script (or notebook) imports, as ``convert`` finds them (empty when its text
    cannot be read as a program)."""
    import libcst as cst

    from accelify.program import local_modules

    text = result.old
    if result.path.endswith(".ipynb"):  # a notebook imports what its code cells import
        from accelify.errors import SourceError
        from accelify.notebook import runnable_program

        try:
            text = runnable_program(result.old, result.path)[0]
        except SourceError:
            return []
    try:
        return local_modules(result.path, cst.parse_module(text))
    except cst.ParserSyntaxError:
        return []


def copy_root(script: str | os.PathLike[str], modules: "Sequence[ModuleText]") -> Path:
    """The folder a runnable copy of the program mirrors: the outermost folder one of its modules is imported from
    (``pygcn/`` above ``pygcn/train.py`` for ``from pygcn.utils import ...``; the project root for cleanrl's
    ``cleanrl_utils``), else the script's own folder. Each module sits under it where its import name puts it."""
    root = Path(script).resolve().parent
    for module in modules:
        path = Path(module.path).resolve()
        depth = len(module.unit.split(".")) - (0 if path.name == "__init__.py" else 1)
        found_from = path.parents[depth]
        if root.is_relative_to(found_from):
            root = found_from
    return root


def program_copies(result: Result, destination: Destination, written: set[str]) -> list[tuple[str, bytes]]:
    """The local modules of ``result``'s script that its conversion left as they were, as ``(destination, bytes)``
    to copy beside the written script, so that a program written elsewhere (``convert -o OUT_DIR/``) runs there:
    every module it imports, changed or not, in its place under ``copy_root``, with the ``__init__.py`` of every
    package on the way (the script's own too: ``python -m pkg.train``). ``written`` (resolved destinations already
    written in this run) are left alone."""
    if result.failed or result.needs_attention:
        return []
    modules = program_modules(result)
    root = copy_root(result.path, modules)
    done = {os.path.realpath(c.path) for c in result.companions if c.changed}
    paths = [m.path for m in modules if os.path.realpath(m.path) not in done]
    for start in [*paths, *(c.path for c in result.companions if c.changed), result.path]:  # the packages on the way
        folder = Path(start).resolve().parent
        while folder.is_relative_to(root) and folder != root:
            init = folder / "__init__.py"
            if init.is_file() and str(init) not in paths and os.path.realpath(init) not in done:
                paths.append(str(init))
            folder = folder.parent
    out: list[tuple[str, bytes]] = []
    taken = set(written)
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        where = destination(Result(path, FAILED, "", ""))
        if where is None or os.path.realpath(where) in taken or os.path.realpath(where) == real:
            continue
        taken.add(os.path.realpath(where))
        with open(path, "rb") as source:  # byte for byte, as the user wrote it
            out.append((os.fspath(where), source.read()))
    return out
