"""Reading torch elastic's failure report: the process that failed first by cause is named first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelify.runtime import failure_report as fr
from accelify.runtime.errors import (
    CheckpointError,
    CheckpointPeerError,
    DistributedOperationException,
    FolderError,
    ProcessMissingError,
    peer_failure_names,
)

GLOO_RESET = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
              "[127.0.0.1]:16512: Connection reset by peer. This is typically caused by a remote worker hanging")


def failure(tmp_path: Path, rank: int, exitcode: int, line: str | None = None, stack: str = "", when: int = 100):
    """A ``ProcessFailure`` as torch elastic builds it, from the error file a worker's recorder writes."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    path = tmp_path / f"error_{rank}.json"
    if line is not None:
        stack = stack or f"Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    step()\n{line}\n"
        path.write_text(json.dumps({"message": {"message": line, "extraInfo": {
            "py_callstack": stack, "timestamp": str(when)}}}))
    made = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file=str(path))
    if line is None:
        object.__setattr__(made, "timestamp", when)  # the agent's clock when it noticed the exit
    return made


def test_a_killed_rank_comes_before_the_rank_that_lost_its_connection(tmp_path: Path) -> None:
    # rank 1 SIGKILLed; rank 0 recorded Gloo's reset, then the agent's SIGTERM reached it (earlier timestamp)
    failures = {0: failure(tmp_path, 0, -15, GLOO_RESET, when=99), 1: failure(tmp_path, 1, -9, when=100)}
    first, second = fr.order_reports(failures)
    assert (first.rank, first.kind, first.exit_code, second.kind) == (1, "cause", -9, "consequence")
    assert fr.first_failed_rank(failures) == 1
    # rank 0 SIGKILLed; rank 1 exited with the reset before the agent looked (same second, lower rank loses)
    failures = {0: failure(tmp_path, 0, -9, when=100), 1: failure(tmp_path, 1, 1, GLOO_RESET, when=100)}
    assert [r.rank for r in fr.order_reports(failures)] == [0, 1]


def test_an_error_of_its_own_beats_an_error_caused_by_a_peer(tmp_path: Path) -> None:
    full = "OSError: [Errno 28] No space left on device: '/ck/.tmp/random_states_1.pkl'"
    aborted = "accelify.runtime.errors.CheckpointPeerError: Another process failed while writing the checkpoint /ck"
    failures = {0: failure(tmp_path, 0, 1, "CheckpointPeerError: Another process failed", stack=f"Traceback\n{aborted}\n",
                           when=5),
                1: failure(tmp_path, 1, -15, full, when=6)}  # recorded its own error, then was stopped
    assert [(r.rank, r.kind) for r in fr.order_reports(failures)] == [(1, "cause"), (0, "consequence")]


def test_the_agents_sigterm_comes_last_and_abort_after_causes(tmp_path: Path) -> None:
    failures = {0: failure(tmp_path, 0, -15, when=1), 1: failure(tmp_path, 1, -6, when=2),
                2: failure(tmp_path, 2, 3, when=9), 3: failure(tmp_path, 3, 1, GLOO_RESET, when=0)}
    assert [(r.rank, r.kind) for r in fr.order_reports(failures)] == [
        (2, "cause"), (1, "abort"), (3, "consequence"), (0, "stopped")]


def test_consequences_are_read_from_exception_lines_only() -> None:
    assert fr.is_consequence("DistNetworkError: failed to recv, got 0 bytes")
    assert fr.is_consequence("RuntimeError: wrapped", "Traceback (most recent call last):\n  File \"a.py\"\n"
                             f"{GLOO_RESET}\n\nThe above exception was the direct cause of the following exception:\n")
    assert fr.is_consequence("ProcessMissingError: Process 1 exited while ...")
    # a frame's code that names a peer error, or a user's own connection error, is not a consequence
    assert not fr.is_consequence("ValueError: boom", "Traceback\n  File \"a.py\"\n    except FolderError:\nValueError: boom")
    assert not fr.is_consequence("ConnectionResetError: [Errno 104] Connection reset by peer")
    assert {"PeerFailureError", "ProcessMissingError", "CheckpointPeerError", "FolderError"} <= peer_failure_names()
    # still caught where their families are: a save's peer failure is a CheckpointError, FolderError an OSError
    assert issubclass(FolderError, OSError) and issubclass(CheckpointPeerError, CheckpointError)
    assert issubclass(ProcessMissingError, DistributedOperationException)


@pytest.mark.parametrize(("code", "text"), [
    (1, "exited with code 1"),
    (-9, "was killed by SIGKILL (likely out of memory"),
    (-11, "was killed by SIGSEGV (a segmentation fault"),
    (-15, "was killed by SIGTERM"),
])
def test_how_it_ended(code: int, text: str) -> None:
    assert fr.how_it_ended(code).startswith(text)


@pytest.mark.multiprocess
def test_reading_the_report_loads_no_torch() -> None:
    code = "import sys, accelify.runtime.failure_report; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
