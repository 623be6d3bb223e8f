"""The frozen, picklable records the conversion pipeline returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from accelify.codemods.engine.outcome import ALREADY_CONVERTED, ATTENTION, CONVERTED, FAILED, STATUSES, UNCHANGED, ConversionWarning

__all__ = ["STATUSES", "ConversionWarning", "Result"]


@dataclass(frozen=True)
class Result:
    """The outcome of converting one file.

    ``status`` is one of ``accelify.codemods.outcome.STATUSES``: ``converted`` (``new`` differs from
    ``old``), ``unchanged``, ``attention`` (refused: converting it would train wrongly; the warnings
    say what to fix, ``reason`` the first of them; ``new == old``), ``skipped`` (not a candidate, or
    ``# accelify: skip-file``; ``reason`` says which) or ``failed`` (``error`` says why, ``detail``
    holds the traceback of an internal error; ``new == old``).
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
    companions: tuple["Result", ...] = ()  # local modules converted with this script (written together)

    @property
    def changed(self) -> bool:
        return self.status == CONVERTED

    @property
    def problems_left(self) -> bool:
        """A file converted before whose second look still reports problems left to the user (``--check`` fails)."""
        return self.status == UNCHANGED and self.reason == ALREADY_CONVERTED and bool(self.warnings)

    @property
    def needs_attention(self) -> bool:
        return self.status == ATTENTION

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (no source text, only what a report needs)."""
        data = asdict(self)
        for key in ("old", "new", "detail", "companions"):
            data.pop(key)
        data["changes"] = list(self.changes)
        data["warnings"] = [asdict(w) | {"text": w.format()} for w in self.warnings]
        data["companions"] = [c.to_json() for c in self.companions]
        return data
