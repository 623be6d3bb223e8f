"""The frozen result of a verification: checks in order, the runs behind them, and the JSON form.

A :class:`VerifyReport` passes when every check passed. A check that could not be judged is ``skipped`` with the
reason (a script the conversion left unchanged has nothing to check on N processes; a script that draws no batches
from a DataLoader cannot be checked for sharding): a report with a skipped check has not proved the conversion,
so it does not pass, but it has not failed either.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class VerifyOptions:
    """How to verify: ``steps`` optimizer steps per run (0: no step limit), ``batches`` per DataLoader epoch and
    ``epochs`` per run (the epoch limit: every loader's epoch ends after ``batches`` batches, so the script's own
    epoch-end code runs, and the run ends when a training loader starts epoch ``epochs + 1``; 0: no limit; both
    limits 0: run the script to its end), ``processes`` for the distributed run, ``timeout`` seconds per run, the
    script's ``args``, the ``seed`` set before each run starts, and the ``torch.allclose`` tolerances for losses and
    parameters (one process vs the original, and process vs process)."""

    steps: int = 5
    processes: int = 2
    timeout: float = 300.0
    args: tuple[str, ...] = ()
    seed: int = 0
    rtol: float = 1e-5
    atol: float = 1e-7
    batches: int = 0
    epochs: int = 0

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"steps must be 0 (no limit) or more, not {self.steps}")
        if self.batches < 0 or self.epochs < 0:
            raise ValueError(f"batches and epochs must be 0 (no limit) or more, not {self.batches}, {self.epochs}")
        if self.epochs and not self.batches:
            raise ValueError("an epoch limit needs a batch limit (batches): a whole epoch may be long")
        if self.processes < 2:
            raise ValueError(f"the distributed run needs 2 processes or more, not {self.processes}")
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, not {self.timeout}")

    @property
    def limit(self) -> str:
        """The limits in words: "2 epochs of 5 batches", "5 steps", "to the end"."""
        parts = []
        if self.batches:
            per = f"{self.batches} batch{'es' if self.batches != 1 else ''}"
            parts.append(f"{self.epochs} epoch{'s' if self.epochs != 1 else ''} of {per}" if self.epochs
                         else f"epochs of {per}")
        if self.steps:
            parts.append(f"{self.steps} step{'s' if self.steps != 1 else ''}")
        return ", at most ".join(parts) if parts else "to the end"


@dataclass(frozen=True)
class CheckResult:
    """One check: ``status`` is passed, failed or skipped; ``detail`` says what was measured (or what went wrong,
    naming the process and the step), ``meaning`` what a failure means for the user's training, in words."""

    name: str
    stage: str  # "1 process" or "N processes"
    status: str
    detail: str
    meaning: str = ""
    stacks: tuple[tuple[int, str], ...] = ()  # (rank, Python stack) of each process of a hung run

    @property
    def failed(self) -> bool:
        return self.status == FAILED


@dataclass(frozen=True)
class RunSummary:
    """One run behind the checks: how it ended, how long it took, what each process printed and recorded."""

    label: str  # "original", "converted", "distributed"
    processes: int
    exit_code: int | None
    timed_out: bool
    seconds: float
    steps: tuple[int, ...]  # optimizer steps recorded, per process
    backwards: tuple[int, ...]
    stdout: tuple[str, ...] = field(default=(), repr=False)
    stderr: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class VerifyReport:
    """The verdict on one script: its conversion, every check, and the runs behind them (see ``verify_script``)."""

    script: str
    converted: str  # where the converted script came from: a path, or "accelify convert"
    conversion: str  # the pipeline's status: converted, unchanged, skipped, failed (or "given")
    options: VerifyOptions
    checks: tuple[CheckResult, ...]
    runs: tuple[RunSummary, ...] = ()
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Every check passed (none failed, none skipped)."""
        return bool(self.checks) and all(c.status == PASSED for c in self.checks)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks)

    @property
    def first_failure(self) -> CheckResult | None:
        return next((c for c in self.checks if c.failed), None)

    def check(self, name: str) -> CheckResult:
        """The check called ``name`` (KeyError if there is none)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def run(self, label: str) -> RunSummary | None:
        return next((r for r in self.runs if r.label == label), None)

    @property
    def verdict(self) -> str:
        """One line: what the first failing check found and what it means, or why nothing was proved."""
        failure = self.first_failure
        if failure is not None:
            text = f"{failure.name}: {failure.detail}"
            return f"{text}; {failure.meaning}" if failure.meaning else text
        skipped = [c for c in self.checks if c.status == SKIPPED]
        if skipped:
            return f"not verified: {skipped[0].name}: {skipped[0].detail}"
        return (f"verified: the conversion trains like the original on one process and as data-parallel on "
                f"{self.options.processes} processes")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: options, verdict, every check and every run (outputs cut to their last 4000 chars)."""
        runs = []
        for run in self.runs:
            data = asdict(run)
            data["stdout"] = [text[-4000:] for text in run.stdout]
            data["stderr"] = [text[-4000:] for text in run.stderr]
            runs.append(data)
        return {
            "script": self.script,
            "converted": self.converted,
            "conversion": self.conversion,
            "passed": self.passed,
            "verdict": self.verdict,
            "options": asdict(self.options),
            "checks": [asdict(c) | {"stacks": [{"rank": r, "stack": s} for r, s in c.stacks]} for c in self.checks],
            "runs": runs,
            "seconds": round(self.seconds, 3),
        }


def write_report(report: VerifyReport, path: str | Path) -> None:
    """Write ``report.to_json()`` to ``path`` atomically (a reader never sees half a report)."""
    from accelify.source import write_atomic

    write_atomic(Path(path), (json.dumps(report.to_json(), indent=2, allow_nan=True) + "\n").encode("utf-8"))
