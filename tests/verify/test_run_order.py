"""The order verify starts its three runs in: at once with a launcher that starts every run at once, the N-process
run after the original's record exists with one that queues runs behind a few fork servers."""

from __future__ import annotations

import threading
from pathlib import Path

from accelify.verify.report import VerifyOptions
from accelify.verify.runner import Launcher, RunOutcome, RunSpec
from accelify.verify.verification import _run_all
from accelify.verify.workspace import ScriptFiles

SCRIPT = ScriptFiles("train.py", "print('hi')\n")


class _Recording(Launcher):
    """Runs nothing: notes when each run starts, and when the original's ends: only once the N-process run started
    (or after ``patience`` seconds); it never writes a record."""

    def __init__(self, queues: bool, patience: float) -> None:
        super().__init__()
        self.queues = queues
        self.patience = patience
        self.started: list[str] = []
        self.distributed = threading.Event()

    def run(self, spec: RunSpec) -> RunOutcome:
        self.started.append(spec.label)
        if spec.label == "distributed":
            self.distributed.set()
        elif spec.label == "original":
            self.distributed.wait(self.patience)
            self.started.append("original ended")
        return RunOutcome(spec, 0, False, 0.0, ("",), ("",), ())


def test_a_launcher_that_starts_every_run_at_once_does_not_hold_the_n_process_run(tmp_path: Path) -> None:
    """The N-process run is the longest: under load the original's record took seconds to appear, and the
    N-process run waited for it before starting. Its hook waits for the original's record itself."""
    launcher = _Recording(queues=False, patience=10.0)
    _run_all(tmp_path, SCRIPT, SCRIPT, VerifyOptions(), launcher, concurrent=True)
    assert launcher.started.index("distributed") < launcher.started.index("original ended"), launcher.started


def test_a_launcher_that_queues_runs_starts_the_n_process_run_after_the_original(tmp_path: Path) -> None:
    """With a few fork servers, the N-process run could take the server the original is queued for: it starts only
    once the original's record exists or its run ended."""
    launcher = _Recording(queues=True, patience=0.5)
    _run_all(tmp_path, SCRIPT, SCRIPT, VerifyOptions(), launcher, concurrent=True)
    assert launcher.started.index("distributed") > launcher.started.index("original ended"), launcher.started
