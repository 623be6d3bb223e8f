"""--max-restarts with save_state/load_state: a worker SIGKILLed mid-run, the run resumes and
ends with exactly the weights of an uninterrupted run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accelify.runtime import debug_launcher

WORKER = Path(__file__).parent / "workers" / "elastic_train.py"
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]


def load_worker():
    spec = importlib.util.spec_from_file_location("elastic_train_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.multiprocess
def test_killed_worker_restarts_and_resumes_to_the_same_weights(tmp_path: Path, clean_env) -> None:
    killed = tmp_path / "killed"
    killed.mkdir()
    cmd = [*ACCELIFY, "launch", "--cpu", "-n", "2", "--max-restarts", "1", "--monitor-interval", "0.2",
           str(WORKER), str(killed), "--kill-at", "6"]
    interrupted = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env(None))
    assert interrupted.returncode == 0, interrupted.stderr
    assert (killed / "attempt1.rank1").exists(), "the worker group was not restarted"
    assert "ELASTIC-DONE attempt 1 resumed from 4" in interrupted.stdout
    # The same training, uninterrupted, on 2 processes (forked from here: no second interpreter start-up).
    plain = tmp_path / "plain"
    plain.mkdir()
    debug_launcher(load_worker().train, (plain, None))
    resumed, expected = torch.load(killed / "final.pt"), torch.load(plain / "final.pt")
    assert resumed.keys() == expected.keys()
    for name in expected:
        assert torch.equal(resumed[name], expected[name]), name
