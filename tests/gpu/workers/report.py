"""What every GPU worker uses: named checks whose outcome (passed, detail) each process writes as JSON.

A check is a function returning a detail string; an exception fails it with the exception and where it was
raised, and the worker goes on with the next check (so one run reports every check). Each process writes
``<report dir>/rank<N>.json``; the test reads them all (``tests/gpu/gpu_runs.py``).
"""

from __future__ import annotations

import json
import os
import traceback
from typing import Callable


class Report:
    """The outcome of each check on this process, written to ``<folder>/rank<rank>.json`` by :meth:`write`."""

    def __init__(self, folder: str, rank: int | None = None) -> None:
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.path = os.path.join(folder, f"rank{self.rank}.json")
        self.results: dict[str, dict[str, object]] = {}

    def check(self, name: str, function: Callable[[], str]) -> bool:
        """Run ``function``; record it as passed with its detail, or failed with the error and its last frames."""
        try:
            detail = function()
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the other checks
            frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
            self.results[name] = {"passed": False, "detail": f"{type(exc).__name__}: {exc}",
                                  "traceback": "".join(frames[-6:])}
            return False
        self.results[name] = {"passed": True, "detail": str(detail)}
        return True

    def write(self) -> None:
        with open(self.path, "w", encoding="utf-8") as fh:
            json.dump(self.results, fh, indent=1)
