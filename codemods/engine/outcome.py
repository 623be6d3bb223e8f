"""What a conversion ends with: its status, and the one frozen warning record that goes from a rule to the output.

A rule reports a ``ConversionWarning`` about a node; the engine fills in its line and column once, at
the end (one position pass); the pipeline fills in the path. The same record is what ``--json``,
the terminal and reports show.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

CONVERTED = "converted"  # the new text differs from the old
UNCHANGED = "unchanged"  # nothing to do (already converted, or nothing trains here)
ATTENTION = "attention"  # refused: converting would train wrongly; the warnings say what to fix by hand
SKIPPED = "skipped"  # not a candidate (no torch import, a notebook, ``# accelify: skip-file``)
FAILED = "failed"  # could not be read or parsed, or a rule failed
STATUSES: tuple[str, ...] = (CONVERTED, UNCHANGED, ATTENTION, SKIPPED, FAILED)
ALREADY_CONVERTED = "already uses an Accelerator"  # the ``reason`` of an unchanged file that was converted before
NOT_A_CANDIDATE = "does not import torch"  # the ``reason`` of a file skipped because it does not import torch


@dataclass(frozen=True)
class ConversionWarning:
    """Something the tool left for a human: which code, why, the manual fix, and where."""

    code: str
    message: str
    fix: str
    line: int = 1
    col: int = 1
    path: str = "<string>"

    def at(self, line: int, col: int) -> "ConversionWarning":
        return replace(self, line=line, col=col)

    def in_file(self, path: str) -> "ConversionWarning":
        return replace(self, path=path)

    def format(self) -> str:
        """``path:line:col: ACCnnn message (fix)``."""
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message} ({self.fix})"
