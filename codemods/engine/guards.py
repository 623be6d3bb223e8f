"""One guard for neighbouring statements kept to the main process.

Rules keep statements to the main process one at a time (a write here, a save there, a helper's call), each as
``if accelerator.is_main_process:`` around it. Where two such guards end up next to each other in one block, the
converted script reads better with one: their bodies joined under the first. The test is a property of the
process that never changes during a run, so joining them changes nothing but the text. Only guards the conversion
wrote are joined (the applier, ``edits.py``, names the blocks' statements that were ``if`` statements of the script:
``if rank == 0:`` rewritten keeps its place), and never across a comment.
"""

from __future__ import annotations

from typing import Collection

import libcst as cst


def join_main_guards(body: list[cst.BaseStatement], own: Collection[int]) -> list[cst.BaseStatement]:
    """``body`` with each run of adjacent ``if X.is_main_process:`` blocks (no ``else``, the same ``X``, no comment
    above the later one, none of them the script's own ``if``: ``id`` in ``own``) made one block."""
    out: list[cst.BaseStatement] = []
    for stmt in body:
        last = out[-1] if out else None
        name = _guard(stmt) if id(stmt) not in own else None
        if name is not None and last is not None and id(last) not in own and _guard(last) == name \
                and not _commented(stmt):  # type: ignore[arg-type]
            assert isinstance(last, cst.If) and isinstance(stmt, cst.If)
            inner = list(stmt.body.body)  # type: ignore[union-attr]
            out[-1] = last.with_changes(body=last.body.with_changes(body=[*last.body.body, *inner]))  # type: ignore[union-attr]
            continue
        out.append(stmt)
    return out


def _guard(stmt: cst.BaseStatement) -> str | None:
    """The accelerator's name when ``stmt`` is ``if NAME.is_main_process:`` with an indented body and no ``else``."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None or not isinstance(stmt.body, cst.IndentedBlock):
        return None
    test = stmt.test
    if isinstance(test, cst.Attribute) and test.attr.value == "is_main_process" and isinstance(test.value, cst.Name):
        return test.value.value
    return None


def _commented(stmt: cst.If) -> bool:
    """Whether a comment sits above ``stmt`` or at the end of its ``if`` line."""
    return any(line.comment is not None for line in stmt.leading_lines) or stmt.body.header.comment is not None  # type: ignore[union-attr]
