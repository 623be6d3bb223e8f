"""What the GPU tests share: how many GPUs there are, running a worker, and reading the checks it reported.

The workers (``tests/gpu/workers/``) run each check on every process and write ``rank<N>.json``; a test asserts
one named check, so one run of a worker feeds several tests and a failure names the check, the process and
the error. Runs go through this interpreter's ``accelify launch`` (N processes) or ``python`` (one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

import pytest
import torch

WORKERS = Path(__file__).resolve().parent / "workers"
ROOT = Path(__file__).resolve().parents[2]
GPU_COUNT = torch.cuda.device_count()  # does not initialise CUDA: this test process never touches the GPUs
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]
TIMEOUT = 600.0


def gpu_env(**extra: str) -> dict[str, str]:
    """A child's environment: nothing inherited from a launcher or accelify/accelerate settings; one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_", "TORCHELASTIC_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def run(argv: list[str], env: Mapping[str, str] | None = None, cwd: Path | None = None,
        timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run ``argv``; a timeout becomes a failed result (exit code -9) with what was printed, never a hang."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env or gpu_env()), cwd=cwd or ROOT,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return subprocess.CompletedProcess(argv, -9, out, err + f"\n(killed after {timeout:.0f} s)")


def launch(worker: str, *args: str, processes: int, launch_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``accelify launch --multi_gpu -n <processes> [launch_args] workers/<worker> <args>``."""
    return run([*ACCELIFY, "launch", "--multi_gpu", "-n", str(processes), *launch_args, str(WORKERS / worker), *args])


def python(worker: str, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python workers/<worker> <args>``: one process."""
    return run([sys.executable, str(WORKERS / worker), *args], env=env)


class Checks:
    """The checks a worker run reported, per process."""

    def __init__(self, folder: Path, proc: subprocess.CompletedProcess, processes: int) -> None:
        self.folder, self.proc = folder, proc
        self.by_rank: dict[int, dict[str, dict[str, object]]] = {}
        for rank in range(processes):
            path = folder / f"rank{rank}.json"
            if path.is_file():
                self.by_rank[rank] = json.loads(path.read_text(encoding="utf-8"))
        self.processes = processes

    def expect(self, name: str) -> str:
        """Fail unless check ``name`` passed on every process; skip if the worker said it could not run it."""
        output = f"\n--- exit code {self.proc.returncode} ---\n--- stdout ---\n{self.proc.stdout[-4000:]}" \
                 f"\n--- stderr ---\n{self.proc.stderr[-6000:]}"
        missing = [r for r in range(self.processes) if name not in self.by_rank.get(r, {})]
        if missing:
            pytest.fail(f"check {name!r} was not reported by process(es) {missing}{output}", pytrace=False)
        failed = {r: results[name] for r, results in self.by_rank.items() if not results[name]["passed"]}
        if failed:
            lines = [f"process {r}: {o['detail']}\n{o.get('traceback', '')}" for r, o in sorted(failed.items())]
            pytest.fail(f"check {name!r} failed\n" + "\n".join(lines) + output, pytrace=False)
        detail = str(self.by_rank[0][name]["detail"])
        if detail.startswith("SKIP: "):
            pytest.skip(detail[len("SKIP: "):])
        return detail


needs_two_gpus = pytest.mark.skipif(GPU_COUNT < 2, reason=f"needs 2 GPUs; {GPU_COUNT} visible")
