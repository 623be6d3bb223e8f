"""Real `accelify launch` runs: two Gloo CPU processes, a failing rank, and Ctrl-C (no orphans)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "launch_checks.py"
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]

pytestmark = pytest.mark.multiprocess


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in fh)
    except FileNotFoundError:
        return False


def assert_no_orphans(out: Path, ranks: int = 2) -> None:
    pids = [int((out / f"pid.{r}").read_text()) for r in range(ranks)]
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "workers survived the launcher"


def test_two_cpu_processes_get_settings_and_arguments(tmp_path: Path, clean_env) -> None:
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "--mixed-precision", "bf16",
           "--gradient_accumulation_steps", "2", "--debug", str(WORKER), "ok", str(tmp_path),
           "--lr", "0.5", "--debug", "-n", "5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(None), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "LAUNCH-OK rank 0" in proc.stdout and "LAUNCH-OK rank 1" in proc.stdout
    assert proc.stderr.splitlines()[0] == (
        "accelify launch: 2 processes x 1 machine, cpu (gloo), mixed precision bf16, gradient accumulation 2, debug")
    # The two ranks' lines may interleave on the shared stdout: match the path, not a whole line.
    launch_file = re.search(r"LAUNCH-FILE (\S+?\.yaml)", proc.stdout)
    assert launch_file and not os.path.exists(launch_file.group(1))  # removed after the run


def test_failing_rank_is_named_with_its_traceback_and_nothing_survives(tmp_path: Path, clean_env) -> None:
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", str(WORKER), "fail", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(None))
    assert proc.returncode == 1, proc.stderr
    summary = failure_summary(proc.stderr)
    assert summary.startswith("accelify launch: rank 1 failed first: it exited with code 1.")
    assert 'raise ValueError("boom from rank 1")' in summary and "ValueError: boom from rank 1" in summary
    assert "launch/worker" not in summary and "Also failed" not in summary
    assert_no_orphans(tmp_path)


def failure_summary(stderr: str) -> str:
    """The launcher's own report: from its failure line to the end."""
    return stderr[stderr.index("accelify launch: rank"):]


@pytest.mark.parametrize("victim", [1, 0])
def test_a_sigkilled_rank_is_named_with_its_signal_and_exit_code(tmp_path: Path, clean_env, victim: int) -> None:
    # The other rank's all-reduce fails with Gloo's "Connection reset by peer" (often recorded before the
    # launcher's SIGTERM reaches it): that is a consequence, and must not be named as the first failure.
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", str(WORKER), "kill", str(tmp_path), str(victim)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(None))
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    summary = failure_summary(proc.stderr)
    assert summary.startswith(f"accelify launch: rank {victim} failed first: it was killed by SIGKILL (likely out of "
                              "memory: the kernel's out-of-memory killer sends SIGKILL; check `dmesg`"), summary
    assert "no traceback was recorded: a process killed by a signal cannot report one" in summary
    assert "Also failed" not in summary and "Connection reset" not in summary, summary
    assert_no_orphans(tmp_path)


def test_a_full_disk_during_save_state_names_the_rank_whose_disk_was_full(tmp_path: Path, clean_env) -> None:
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", str(WORKER), "disk-full", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(None))
    assert proc.returncode == 1, proc.stderr
    summary = failure_summary(proc.stderr)
    assert summary.startswith("accelify launch: rank 1 failed first: it exited with code 1."), summary
    assert "OSError: [Errno 28] No space left on device" in summary, summary
    assert "Also failed" not in summary and "CheckpointPeerError" not in summary.split("Failed because")[0], summary
    assert_no_orphans(tmp_path)


def test_ctrl_c_stops_every_worker(tmp_path: Path, clean_env) -> None:
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", str(WORKER), "hang", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(None))
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"pid.{r}").exists() for r in range(2)) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "stopped by signal 2" in err
    assert_no_orphans(tmp_path)

