"""Time from command to first training step: `accelify launch --cpu -n 2` vs `torchrun --nproc-per-node 2`.

Both commands run the same small DDP script on 2 Gloo CPU processes. Each process writes the wall
time of its first finished optimizer step; a run's latency is the latest of those minus the time
the command was started. Runs are interleaved (accelify, torchrun, accelify, ...) and the medians
compared. Target: ratio <= 1.10.

    python benchmarks/launch_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = '''
import os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 32)).sum().backward()
opt.step()
with open(os.path.join(sys.argv[1], f"first_step.{dist.get_rank()}"), "w") as fh:
    fh.write(repr(time.time()))
dist.barrier()  # leave together: Gloo can abort a process whose peer tore down first
dist.destroy_process_group()
'''


def command(name: str, script: Path, out: Path) -> list[str]:
    """Both through this interpreter (not whatever ``accelify``/``torchrun`` PATH finds first), as their
    console scripts do: ``accelify`` is ``accelify.cli:main``, ``torchrun`` is ``torch.distributed.run``."""
    if name == "accelify":
        return [sys.executable, "-c", "from accelify.cli import main; main()",
                "launch", "--cpu", "-n", "2", "-q", str(script), str(out)]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script), str(out)]


def one_run(name: str, script: Path, workdir: Path) -> float:
    out = Path(tempfile.mkdtemp(dir=workdir))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_"))}
    env["OMP_NUM_THREADS"] = "1"  # both sides alike (torchrun would otherwise print a notice)
    start = time.time()
    proc = subprocess.run(command(name, script, out), env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"{name} run failed ({proc.returncode}):\n{proc.stderr}")
    stamps = [float((out / f"first_step.{r}").read_text()) for r in range(2)]
    return max(stamps) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        script = workdir / "first_step.py"
        script.write_text(SCRIPT)
        one_run("torchrun", script, workdir)  # warm the file cache for both
        one_run("accelify", script, workdir)
        times: dict[str, list[float]] = {"accelify": [], "torchrun": []}
        for _ in range(opts.runs):
            for name in ("accelify", "torchrun"):
                times[name].append(one_run(name, script, workdir))
    med = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:9s} median {med[name]:.3f} s  runs: {', '.join(f'{v:.3f}' for v in values)}")
    ratio = med["accelify"] / med["torchrun"]
    print(f"ratio accelify/torchrun (time to first step, median of {opts.runs}): {ratio:.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
