"""Debug mode: the verdicts on per-process descriptors, call sites, and one 2-process launch."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from accelify.runtime import debug
from accelify.runtime.debug import _pad_compatible, _verdict, call_site, named_operation, operation_name

WORKERS = Path(__file__).parent / "workers"


def desc(op: str, shapes, rule: str = "same", site: str = "train.py:1", dtypes=None) -> dict:
    return {"op": op, "site": site, "rule": rule, "shapes": shapes, "dtypes": dtypes}


def test_shape_mismatch_message_has_accelerates_form() -> None:
    message = _verdict([desc("accelify.runtime.broadcast", [1, 5]), desc("accelify.runtime.broadcast", [1, 2, 5])])
    assert message.startswith(
        "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n\n"
        "Operation: `accelify.runtime.broadcast`\nInput shapes:\n  - Process 0: [1, 5]\n  - Process 1: [1, 2, 5]\n"
    )
    assert _verdict([desc("g", [2, 3]), desc("g", [2, 3])]) is None


def test_different_operations_name_each_process_and_site() -> None:
    message = _verdict([desc("accelify.runtime.gather", [1], site="a.py:3"), desc("wait_for_everyone", None, "none", "a.py:9")])
    assert "  - Process 0: `accelify.runtime.gather` at a.py:3\n  - Process 1: `wait_for_everyone` at a.py:9" in message


def test_dtype_mismatch_and_padding_rules() -> None:
    assert "dtype" in _verdict([desc("r", [2], dtypes="float32"), desc("r", [2], dtypes="float64")])
    assert _pad_compatible([[2, 3], [4, 3]], 0) and not _pad_compatible([[2, 3], [2, 4]], 0)
    assert _pad_compatible([{"a": [3, 1]}, {"a": [3, 5]}], -1) and not _pad_compatible([[2], [2, 1]], 0)
    assert _pad_compatible([[[1], [2]], [[3], [2]]], 0) and not _pad_compatible([[[1]], [[1], [2]]], 0)
    assert _verdict([desc("p", [2, 3], "pad:0"), desc("p", [5, 3], "pad:0")]) is None


def test_call_site_and_operation_names() -> None:
    line = sys._getframe().f_lineno + 1
    assert call_site().endswith(f"test_debug.py:{line}")
    assert operation_name("accelify.runtime.gather") == "accelify.runtime.gather"
    with named_operation("Accelerator.gather_for_metrics"):
        assert operation_name("accelify.runtime.gather") == "Accelerator.gather_for_metrics"


def test_checks_are_noops_with_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debug, "debug_enabled", lambda: pytest.fail("must not be consulted without a process group"))
    debug.check_collective("accelify.runtime.gather", torch.ones(1))
    debug.debug_checkpoint("wait_for_everyone")


@pytest.mark.multiprocess
def test_two_processes(run_distributed) -> None:
    proc = run_distributed(WORKERS / "debug_checks.py", env={"ACCELIFY_DEBUG_MODE": "1"}, timeout=120)
    assert proc.stdout.count("DEBUG-CHECKS-OK") == 2, proc.stdout + proc.stderr
    assert "DEBUG-TIMEOUT-OK" in proc.stdout, proc.stdout + proc.stderr


EARLY_EXIT = WORKERS / "debug_early_exit.py"
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(EARLY_EXIT.read_text().splitlines(), 1) if marker in line)


@pytest.mark.multiprocess
def test_a_process_that_leaves_early_is_named_at_once_in_debug_mode(clean_env, tmp_path: Path) -> None:
    """Without the exit announcement process 0 would wait for the 30-minute process-group timeout."""
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "--debug", "-q", str(EARLY_EXIT), "exit"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=clean_env(None), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "PROCESS-1-DONE" in proc.stdout, proc.stdout + proc.stderr
    waited = float(re.search(r"EARLY-EXIT-SECONDS (\S+)", proc.stdout).group(1))
    assert waited < 30, waited
    summary = proc.stderr[proc.stderr.index("accelify launch: rank"):]
    wait_site, gather_site = f"{EARLY_EXIT}:{_line_of('# WAIT-LINE')}", f"{EARLY_EXIT}:{_line_of('# GATHER-LINE')}"
    assert summary.startswith("accelify launch: rank 0 failed first: it exited with code 1."), summary
    assert (f"ProcessMissingError: Process 1 exited while process 0 waits for it in `wait_for_everyone` "
            f"(called at {wait_site}); it never reached it.") in summary, summary
    assert f"Process 1: its last checked collective was `accelify.runtime.gather` at {gather_site}" in summary
    assert "Rank 0's error is how it saw another process leave" in summary

    cmd[-1] = "die"
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=clean_env(None), cwd=tmp_path)
    assert proc.returncode == 128 + signal.SIGKILL, proc.stdout + proc.stderr
    assert "accelify launch: rank 1 failed first: it was killed by SIGKILL" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch):
    """A real TCPStore, seen by the debug exchange as the process group's (no group: one process plays two)."""
    from datetime import timedelta

    import torch.distributed as dist

    from accelify.runtime import debug_exchange

    server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=20), wait_for_workers=False)
    prefixed = dist.PrefixStore("default_pg", server)
    monkeypatch.setattr(debug_exchange, "_default_store", lambda: prefixed)
    monkeypatch.setattr(debug_exchange, "_STATE", {"store": None, "seq": 0, "last": None, "watch": (prefixed, 0, 2),
                                                   "registered": None})
    return prefixed


def other_client(store):
    """A second connection to ``store``'s server, as another process has (one client serves one call at a time)."""
    from datetime import timedelta

    import torch.distributed as dist

    server = store.underlying_store
    return dist.PrefixStore("default_pg", dist.TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=20)))


def test_an_exit_before_the_wait_is_seen_without_waiting(store) -> None:
    from accelify.runtime import debug_exchange
    from accelify.runtime.errors import ProcessMissingError

    debug_exchange.announce_exit(store, 1, 2, last=("accelify.runtime.gather", "train.py:7"))
    started = time.monotonic()
    with pytest.raises(ProcessMissingError) as info:
        debug_exchange.exchange(desc("wait_for_everyone", None, "none", "train.py:9"), 0, 2)
    assert time.monotonic() - started < 5  # not the store's 20-second timeout
    assert str(info.value).startswith("Process 1 exited while process 0 waits for it in `wait_for_everyone` "
                                      "(called at train.py:9); it never reached it.\n"
                                      "  - Process 1: its last checked collective was `accelify.runtime.gather` at train.py:7")


def test_an_exit_during_the_wait_ends_it_and_an_arrived_process_that_exits_does_not(store) -> None:
    import threading

    from accelify.runtime import debug_exchange
    from accelify.runtime.errors import ProcessMissingError

    # process 1 did the first collective with process 0, then exited: no error for that collective
    store.set("accelify_debug/1/1", __import__("pickle").dumps(desc("wait_for_everyone", None, "none", "train.py:9")))
    debug_exchange.announce_exit(store, 1, 2)
    assert [d["op"] for d in debug_exchange.exchange(desc("wait_for_everyone", None, "none", "train.py:9"), 0, 2)] == [
        "wait_for_everyone", "wait_for_everyone"]
    # process 2 of 3 exits while process 0 waits in the next one (process 1 is there)
    store.set("accelify_debug/2/1", __import__("pickle").dumps(desc("accelify.runtime.gather", [1], site="train.py:4")))

    leaving = other_client(store)

    def leave_once_waited_for() -> None:
        while not leaving.check(["accelify_debug/waiting/0"]) or leaving.get("accelify_debug/waiting/0") != b"2":
            time.sleep(0.01)
        time.sleep(0.2)  # process 0 is inside store.wait by now
        debug_exchange.announce_exit(leaving, 2, 3)

    threading.Thread(target=leave_once_waited_for, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(ProcessMissingError) as info:
        debug_exchange.exchange(desc("accelify.runtime.gather", [1], site="train.py:4"), 0, 3)
    assert time.monotonic() - started < 5
    assert "Process 2 exited while process 0 waits for it in `accelify.runtime.gather` (called at train.py:4)" in str(
        info.value)
    assert "Processes in `accelify.runtime.gather`: 0, 1." in str(info.value)
