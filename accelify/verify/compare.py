"""Numeric comparisons behind the checks (``torch.allclose``'s rule, in plain Python), and where a hung process was
waiting.

``torch.allclose(candidate, reference, rtol, atol)`` holds when ``|candidate - reference| <= atol + rtol *
|reference|`` everywhere; NaN equals NaN here (two runs that diverge the same way computed the same thing). A
parameter is compared by its fingerprint: every value up to the recorder's budget (an even sample beyond it) and
its exact sum, whose tolerance grows with the number of values summed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from accelify.verify.records import Step

_FRAME = re.compile(r'^\s*File "(?P<path>.+)", line (?P<line>\d+) in (?P<func>.+)$')


_INF = float("inf")


def allclose(candidate: Sequence[float], reference: Sequence[float], rtol: float, atol: float) -> bool:
    """``torch.allclose(..., equal_nan=True)`` on two equally long lists of floats, in plain Python: verify's own
    process then never imports torch (seconds of a verify) and builds no tensor per parameter and step."""
    if len(candidate) != len(reference):
        return False
    if candidate == reference:  # equal values: the common case, thousands of steps
        return True
    for a, b in zip(candidate, reference):
        if a == b or (a != a and b != b):  # equal (infinities too), or both NaN
            continue
        if not abs(a - b) <= atol + rtol * abs(b) or abs(b) == _INF:  # NaN against a number, an infinity
            return False  # against another value, or too far apart
    return True


def max_difference(candidate: Sequence[float], reference: Sequence[float]) -> float:
    """The largest absolute difference (NaN where one side is NaN and the other is not)."""
    worst = 0.0
    for a, b in zip(candidate, reference):
        if a != a or b != b:
            if (a != a) != (b != b):
                return float("nan")
            continue
        worst = max(worst, abs(a - b))
    return worst


@dataclass(frozen=True)
class ParameterDifference:
    """The first parameter of a step that differs between two records: ``what`` it is, and by ``how`` much."""

    what: str  # "parameter 2 (64x20)", or "the number of parameters"
    how: str  # "by up to 0.0123", "in its sum by 4.5", "in shape", "(3 against 4)"


def step_difference(candidate: Step, reference: Step, rtol: float, atol: float) -> ParameterDifference | None:
    """The first parameter of ``candidate`` not close to ``reference``'s, or None when all are."""
    if len(candidate.params) != len(reference.params):
        counts = f"({len(candidate.params)} against {len(reference.params)})"
        return ParameterDifference("the number of parameters", counts)
    for index, (mine, theirs) in enumerate(zip(candidate.params, reference.params)):
        what = mine.describe(index)
        if mine.shape != theirs.shape or mine.sampled != theirs.sampled:
            return ParameterDifference(what, "in shape")
        if not allclose(mine.values, theirs.values, rtol, atol):
            return ParameterDifference(what, f"by up to {max_difference(mine.values, theirs.values):.3g}")
        if mine.sampled and not allclose([mine.total], [theirs.total], rtol, atol * max(1, mine.numel)):
            return ParameterDifference(what, f"in its sum by {abs(mine.total - theirs.total):.3g}")
    return None


def waiting_at(stack: str, folder: Path) -> str | None:
    """``train.py:26 in main: accelerator.wait_for_everyone()``: the innermost frame of the main thread's stack
    (as faulthandler wrote it, most recent call first) that lies in the script's folder, with its source line."""
    root = str(folder.resolve())
    for block in _thread_blocks(stack):
        for line in block:
            match = _FRAME.match(line)
            if match is None:
                continue
            path = Path(match["path"])
            try:
                relative = path.resolve().relative_to(root)
            except (ValueError, OSError):
                continue
            number = int(match["line"])
            where = f"{relative}:{number} in {match['func']}"
            code = _source_line(path, number)
            return f"{where}: {code}" if code else where
    return None


def _thread_blocks(stack: str) -> list[list[str]]:
    """The stack's threads, the current (main) thread first."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in stack.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            current = []
            if line.startswith("Current thread "):
                blocks.insert(0, current)
            else:
                blocks.append(current)
        elif current is not None:
            current.append(line)
    return blocks


def _source_line(path: Path, number: int) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""
