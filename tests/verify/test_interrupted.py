"""Ending ``accelify verify`` (Ctrl-C, or SIGTERM from ``timeout`` or a job scheduler) ends the runs it started.

The runs start in sessions of their own (so that a hung one can be ended with its workers), so an interrupt of verify
alone used to leave the original's run, the conversion's and the N-process run's agent and workers going."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = """\
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

with open(os.path.join(sys.argv[1], f"{os.getpid()}.pid"), "w") as mark:
    mark.write("")
loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    time.sleep(600)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ending_verify_ends_every_run_it_started(tmp_path: Path) -> None:
    """SIGTERM (what ``timeout`` sends) is turned into the KeyboardInterrupt Ctrl-C raises: one path for both."""
    number = signal.SIGTERM
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "train.py").write_text(SCRIPT)
    verify = subprocess.Popen([sys.executable, "-c", "from accelify.cli import main; main()", "verify", "train.py", "--steps", "2", "--",
                               str(marks)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list(marks.glob("*.pid"))) < 3 and time.monotonic() < deadline and verify.poll() is None:
            time.sleep(0.2)  # the original, the conversion on one process, and the N-process run's workers
        time.sleep(2.0)
        pids = [int(p.stem) for p in marks.glob("*.pid")]
        assert len(pids) >= 3, verify.communicate(timeout=5) if verify.poll() is not None else pids
        os.kill(verify.pid, number)
        _, err = verify.communicate(timeout=60)
        assert verify.returncode == 130
        assert b"interrupted: the runs verify had started were ended" in err
        time.sleep(0.5)
        assert [pid for pid in pids if _alive(pid)] == []
    finally:
        if verify.poll() is None:
            os.killpg(verify.pid, signal.SIGKILL)
        for pid in (int(p.stem) for p in marks.glob("*.pid")):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
