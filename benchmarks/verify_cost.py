"""What ``accelify verify`` costs against the script's own run: wall time of verify / wall time of ``python train.py``.

The script is a small MLP regression on synthetic data whose epochs are set so that its own run takes about
``--seconds`` (default 30) on this machine. Verify converts it and runs it as a user would (fresh interpreters: the
original and the conversion on one process and the conversion on 2 processes through torch.distributed.run, in
exact mode, all three at once) to the script's end (``steps=0``). Target: a ratio of at most 4.

    python benchmarks/verify_cost.py [--seconds 30] [--reps 1] [--batches K --epochs E]

Without ``--batches`` verify runs each script to its end (``steps=0``, the cost of verifying everything); with
``--batches K --epochs E`` under the epoch limit that ``accelify verify`` uses by default (K=5, E=2): every epoch ends
after K batches and the run after E epochs, so verify's cost no longer grows with the script's.

The ratio depends on free cores: the two one-process runs share the machine, and the 2-process run needs 2 cores.
Measured on the shared 2-core machine, loaded by other work (load 3-7), so the ratios move with the load: a 70-epoch
run took verify 468 s before the recorder wrote sparse, packed fingerprints (every value of every step as JSON
floats: 167 MB per 640 steps) and 142 s after; at --seconds 30 with every fix, 3.46 (load ~4) and 5.07 (load 5-7),
of which the two one-process runs side by side about 2x the script, the 2-process run about 3x, conversion and
checks 9 s. With the logged and returned values recorded (issue 22, second stop: a settrace tracer outside loader
epochs, from the first epoch's end): --seconds 15 at load 7-8 on the 2 cores, 4.52 (script 10.3 s; the one-process
runs 13.1 s and 16.0 s side by side, 2 processes 28.1 s, conversion and checks 2.5 s); an A/B of one recorded run
with and without the tracer differed by less than the load's noise (CPU 6.2 s vs 5.9 s, three runs each). On a
quiet machine (load under 1, fourth stop): --seconds 30 gave 5.56 (script 36.2 s, 337 epochs; the one-process runs
53.4 s and 57.0 s side by side, 2 processes 134.5 s, conversion and checks 9.9 s): the 2-process run alone is 3.7x
the script, so the 4x target needs that run cheaper, not the checks. That run's verdict was a false "same printed
values" (Adam's drift after 832 steps, 1.3 %), since fixed: past the compared steps only a factor N is judged.

Fifth stop: the three runs at once (the 2-process run waits for its peer at every all-reduce, time the one-process
runs fill) and the sparse steps' fingerprints made in one go (0.32 ms a step -> 0.14 ms for this script's 6 tensors,
measured in one process). No quiet machine was to be had (load 4-10 all session), so the old and the new code
verified the same 337-epoch script (36 s on a quiet machine) at the same time, twice: verify 442.8 s -> 349.0 s and
389.6 s -> 255.1 s (the script 108 s and 100 s under that load: ratios 4.10 -> 3.22 and 3.85 -> 2.62; the old code
finished its last run alone, which favours it). CPU seconds barely moved (284.7 -> 301.4, 270.7 -> 275.5: 7.3-8.1x
the script's): on an idle 2-core machine the ratio cannot go under half that, about 3.7-4, so the 4x target there
is at its edge, and the next saving must be CPU (the 2-process exact run: each process takes every step, with the
whole batch loaded, its optimizer step and an all-reduce). The CPU seconds are printed now for that reason.

Sixth stop, the exact 2-process run profiled (process-time cProfile and A/B runs, at load 5-14 on the shared 2 cores,
so every figure carries about 10 % of noise): a recorded 2-process run of this script costs 17.4 s CPU without the
recorder (a real launch, 30 epochs), 18.4 s with it, and 24.5 s in exact mode, where each process takes every step
(split batches: twice a real launch's steps). Per step and process, DDP on Gloo costs about 1 ms of CPU over the
same step without it (a bare all-reduce of the 83k gradients 0.2 ms; gradient_as_bucket_view, static_graph and
broadcast_buffers=False change little), the recorder's step event 0.2-0.35 ms (of which the sparse fingerprint's
six float64 sums are 0.05 ms, near their floor), the exact split under 0.1 ms. Start-up is paid per process:
torch 1.7 s CPU, torch._dynamo 2.5 s (imported at the first optimizer step, by the script's own run too), and
torchrun's agent 1.6 s CPU and 4 s before the workers start (load 8). So the exact run's cost is mostly inherent
(every step twice, each through DDP); what was cut is the records: sparse steps written by columns and the process
group only when it changes. Old and new recorder side by side, alternated, 4 rounds of the original's run and the
exact run at 100 epochs (6400 steps, load 5-12): records 66.0 -> 56.2 MB, reading them back 9.80 -> 8.72 s CPU
(0.89, part of it the serial tail after the runs), the runs' own CPU within the noise (0.985 and 0.997). The
N-process run no longer waits for the original's record before it starts (4.4 s at load 8; only a launcher that
queues runs needs the wait). Whole verifications of 100 epochs (the script alone 32.2 s and 35.2 s at load 7-8), old
and new at the same time, twice (load 7-15): 177.5 -> 172.4 s and 163.5 -> 165.5 s wall, 102.3 -> 99.9 s and
101.0 -> 101.0 s CPU: no difference the load's noise lets through. Left: fork servers for the CLI's runs (about 4 s of imports
per process, 4-5 processes a verification) and an agent-less N-process launch (the agent's 1.6 s and its start
latency) would save more, at the price of runs no longer started as a user starts them.

The epoch limit (verify's default since it was added: 2 epochs of 5 batches): one after the other on the shared 2
cores (load 7.8 and 9.0), --seconds 30 --batches 5 --epochs 2 gave 1.29 (the script 17.2 s for 18 epochs under that
load; verify 22.2 s, 14.1 CPU seconds: the runs 10.8 s, 11.1 s and 16.7 s at once, conversion and checks 5.6 s), and
--seconds 30 to the end 3.73 (the script 13.3 s for 25 epochs; verify 49.7 s, 37.7 CPU seconds). Under the limit
verify's cost is its start-up and checks, about constant: the ratio falls as the script grows. Run to the end, the
recorder's only new work is one dictionary read per batch drawn, below this machine's noise.

Eighth stop, on a quiet machine after the suite (load 0.3 before the runs, which then raise it to 2-5): --seconds 30
to the end 3.96 (the script 34.8 s, 341 epochs; verify 137.7 s, of which the three runs at once 126-130 s and the
conversion and checks 7.7 s), and with the default limit (--batches 5 --epochs 2) 0.24 (script 33.3 s; verify 8.0 s).
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

from accelify.verify import VerifyOptions, verify_script

SCRIPT = '''
import sys
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(epochs):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4096, 64, generator=g)
    y = torch.tanh(x @ torch.randn(64, 1, generator=g))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / len(loader):.6f}")


if __name__ == "__main__":
    main(int(sys.argv[1]))
'''


def plain_run(script: Path, epochs: int) -> float:
    """Seconds of ``python train.py EPOCHS``, torch's import included (as the user's own run pays it)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, str(script), str(epochs)], check=True, cwd=script.parent,
                   stdout=subprocess.DEVNULL, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                                   "CUDA_VISIBLE_DEVICES": ""})
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and its finished children (user and system)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="about how long the script's own run takes")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--batches", type=int, default=0, help="the epoch limit's batches (0: run to the end)")
    parser.add_argument("--epochs", type=int, default=0, help="the epoch limit's epochs (with --batches)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="accelify-verify-cost-") as folder:
        script = Path(folder) / "train.py"
        script.write_text(SCRIPT, encoding="utf-8")
        base = plain_run(script, 0)  # interpreter and torch import
        epochs, seconds = 1, plain_run(script, 1)
        while seconds - base < min(3.0, args.seconds / 3) and epochs < 4096:  # long enough to time an epoch
            epochs *= 2
            seconds = plain_run(script, epochs)
        per_epoch = max((seconds - base) / epochs, 1e-3)
        epochs = max(1, round((args.seconds - base) / per_epoch))
        ratios = []
        for _ in range(args.reps):
            before = cpu_seconds()
            own = plain_run(script, epochs)
            own_cpu, before = cpu_seconds() - before, cpu_seconds()
            start = time.perf_counter()
            report = verify_script(script, options=VerifyOptions(steps=0, timeout=max(600.0, 20 * own),
                                                                 args=(str(epochs),), batches=args.batches,
                                                                 epochs=args.epochs))
            cost = time.perf_counter() - start
            cost_cpu = cpu_seconds() - before
            ratios.append(cost / own)
            print(f"epochs {epochs} ({report.options.limit}): script {own:.1f} s, verify {cost:.1f} s ({report.verdict[:60]}); CPU seconds "
                  f"{own_cpu:.1f} and {cost_cpu:.1f} ({cost_cpu / own_cpu:.2f}x: what a loaded machine cannot hide)",
                  flush=True)
            runs = {run.label: run.seconds for run in report.runs}
            together = max(runs.values(), default=0.0)  # the three runs run at once
            print(f"  at once: original {runs.get('original', 0):.1f} s, converted {runs.get('converted', 0):.1f} s, "
                  f"2 processes {runs.get('distributed', 0):.1f} s; conversion, reading the records and checks "
                  f"{cost - together:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"verify / script: {statistics.median(ratios):.2f} (target <= 4)")


if __name__ == "__main__":
    main()
