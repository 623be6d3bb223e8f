"""The frozen, picklable records the conversion pipeline returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

STATUSES = ("converted", "unchanged", "skipped", "failed")


@dataclass(frozen=True)
class ConversionWarning:
    """Something the tool left for a human: where, which code, why, and the manual fix."""

    path: str
    line: int
    col: int
    code: str
    message: str
    fix: str

    def format(self) -> str:
        """``path:line:col: ACCnnn message (fix)``."""
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message} ({self.fix})"


@dataclass(frozen=True)
class Result:
    """The outcome of converting one file.

    ``status`` is ``converted`` (``new`` differs from ``old``), ``unchanged``, ``skipped`` (not a
    candidate, or ``# accelify: skip-file``; ``reason`` says which) or ``failed`` (``error`` says why,
    ``detail`` holds the traceback of an internal error; ``new == old``).
    """

    path: str
    status: str
    old: str
    new: str
    changes: tuple[str, ...] = ()
    warnings: tuple[ConversionWarning, ...] = ()
    error: str | None = None
    reason: str | None = None
    detail: str | None = None  # the traceback of an internal error, for ``--verbose``
    encoding: str = "utf-8"

    @property
    def changed(self) -> bool:
        return self.status == "converted"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (no source text, only what a report needs)."""
        data = asdict(self)
        for key in ("old", "new", "detail"):
            data.pop(key)
        data["changes"] = list(self.changes)
        data["warnings"] = [asdict(w) | {"text": w.format()} for w in self.warnings]
        return data
