"""Ending a hung run signals only its own processes: a recorded pid that another process took since is spared."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from accelify.verify.records import read_records
from accelify.verify.runner import end_hung_run, still_running

pytestmark = pytest.mark.multiprocess


def _record(prefix: Path, rank: int, pid: int, ppid: int, started: float) -> None:
    """A record as the recorder starts it: its file named by rank and pid, its first event."""
    path = prefix.parent / f"{prefix.name}.rank{rank}.pid{pid}.jsonl"
    path.write_text(json.dumps({"event": "start", "pid": pid, "ppid": ppid, "rank": rank, "time": started}) + "\n")


def test_a_hung_run_ends_its_own_processes_and_spares_a_reused_pid(tmp_path: Path) -> None:
    """Rank 0's recorded process ended long ago and its pid now belongs to another run's worker (a session leader,
    as torchrun's workers are): SIGUSR1 and SIGKILL would end it without a message. Rank 1 is the run's own hung
    process: it is ended, and so is the launcher."""
    prefix = tmp_path / "record"
    launcher = subprocess.Popen(["sleep", "60"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # started after the record's process
    own = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        _record(prefix, 0, stranger.pid, launcher.pid, time.time() - 120.0)
        _record(prefix, 1, own.pid, os.getpid(), time.time() + 0.5)
        records = {r.rank: r for r in read_records(prefix)}
        assert not still_running(records[0]) and still_running(records[1])
        end_hung_run(launcher, prefix)
        assert own.wait(timeout=10) in (-signal.SIGUSR1, -signal.SIGKILL)
        assert launcher.poll() is not None
        assert stranger.poll() is None, "an unrelated process that took a recorded pid was signalled"
    finally:
        for proc in (launcher, stranger, own):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
