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
from typing import Callable, Iterable, Iterator

from accelify.codemods.engine.outcome import FAILED
from accelify.results import Result
from accelify.source import encode

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
