"""Per-step overhead of accelify.runtime against hand-written PyTorch, measured side by side.

Run: ``python benchmarks/step_overhead.py`` (CPU is fine). It prints step-time ratios (the median of
paired ratios: the compared loops alternate step by step):

* b/a: accelify.runtime vs plain PyTorch, one process (target <= 1.03)
* d/c: accelify.runtime vs hand-written DDP under torchrun, two processes (target <= 1.05)
* bf16: accelify ``mixed_precision="bf16"`` vs the loop with ``torch.autocast`` by hand (target <= 1.03)
* accumulation: accelify ``accumulate()`` vs DDP ``no_sync`` by hand, two processes (target <= 1.03)
* sentinels: accelify with its sentinels on (the default) vs ``Accelerator(sentinels=False)``, one and two
  processes (target <= 1.01), as the median of paired ratios and as the ratio of total times (the checks
  run at steps 1, 2, 3, 4, 8, 16, ...: a median of per-step ratios would not see them, totals do), and the
  time spent inside the checks as a share of the step time (noise-free where the ratios are not: on a
  loaded machine two identical loops differ by 1-2%)

``--sentinels`` runs only the sentinel comparisons.

The variants of one comparison run in the same process(es), alternating step by step, so machine
load affects them alike. The hand-written loops are what people write: no autocast or no_sync
constructs where they are not needed, the loss inside ``torch.autocast`` as in PyTorch's recipe.
The one-process variants run three instances each, pooled per sample: where one instance's tensors
land in memory moves its step time by 1-2% either way. Nothing is asserted: the numbers are
printed for people to read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

STEPS, ROUNDS, BATCH, ACCUM, INSTANCES = 40, 12, 64, 4, 3


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def make_data(sampler_ranks: tuple[int, int] | None = None) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(STEPS * BATCH * 2, 128, generator=g), torch.randint(0, 10, (STEPS * BATCH * 2,), generator=g))
    if sampler_ranks is None:
        return DataLoader(ds, batch_size=BATCH)
    from torch.utils.data import DistributedSampler

    rank, world = sampler_ranks
    return DataLoader(ds, batch_size=BATCH, sampler=DistributedSampler(ds, world, rank, shuffle=False))


Step = Callable[[], None]
CLOCKS: list[list[float]] = []  # each loop's sentinel-check durations, emptied when the warm-up ends


def stepper(loader: DataLoader, body: Callable[[int, Any], None]) -> Step:
    """One training step per call: the next batch (a new epoch when the loader runs out), then ``body``."""
    state = {"it": iter(loader), "i": 0}

    def step() -> None:
        try:
            batch = next(state["it"])
        except StopIteration:
            state["it"], state["i"] = iter(loader), 0
            batch = next(state["it"])
        body(state["i"], batch)
        state["i"] += 1

    return step


def plain_loop(model: nn.Module, opt: torch.optim.Optimizer, loader: DataLoader, bf16: bool = False, ddp_accum: bool = False) -> Step:
    """The loop as people write it by hand: plain; bf16 as in PyTorch's autocast recipe; or DDP no_sync accumulation."""
    loss_fn = nn.CrossEntropyLoss()

    def plain(i: int, batch: Any) -> None:
        x, y = batch
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def autocast(i: int, batch: Any) -> None:
        x, y = batch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def accumulate(i: int, batch: Any) -> None:
        x, y = batch
        if (i + 1) % ACCUM:
            with model.no_sync():
                (loss_fn(model(x), y) / ACCUM).backward()
            return
        (loss_fn(model(x), y) / ACCUM).backward()
        opt.step()
        opt.zero_grad()

    return stepper(loader, autocast if bf16 else accumulate if ddp_accum else plain)


def accelify_loop(mixed_precision: str = "no", accum: int = 1, sentinels: bool = True,
                  clock: list[float] | None = None) -> Step:
    """``clock``: the duration of each sentinel check is appended to it (the checks' own share of the time)."""
    from accelify.runtime import Accelerator

    acc = Accelerator(mixed_precision=mixed_precision, gradient_accumulation_steps=accum, sentinels=sentinels)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = acc.prepare(model, opt, make_data())
    if clock is not None and opt._sentinel is not None:
        CLOCKS.append(clock)
        check = opt._sentinel

        def timed(optimizer: Any, step: int) -> int:
            start = time.perf_counter()
            try:
                return check(optimizer, step)
            finally:
                clock.append(time.perf_counter() - start)

        opt._sentinel = timed
    loss_fn = nn.CrossEntropyLoss()

    def body(i: int, batch: Any) -> None:
        x, y = batch
        with acc.accumulate(model):
            loss = loss_fn(model(x), y)
            acc.backward(loss)
            opt.step()
            opt.zero_grad()

    return stepper(loader, body)


def measure(steps: dict[str, Step]) -> dict[str, list[float]]:
    """Step times of each variant; variants alternate step by step, in a shuffled order each time.

    Sample ``i`` of every variant was taken within the same few milliseconds, so ratios of paired
    samples cancel the load drift of a shared machine.
    """
    import random

    order = list(steps)
    rng = random.Random(0)  # the same order on every process, so collectives pair up
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(STEPS):  # warm-up
        for name in order:
            steps[name]()
    for clock in CLOCKS:
        clock.clear()  # the checks of the measured steps only
    for _ in range(ROUNDS * STEPS):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            steps[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def paired_ratio(samples: dict[str, list[float]], ours: str, theirs: str) -> float:
    """Median over paired samples of ours/theirs; with several instances of each (``name#k``), sample
    ``i`` of a variant is the sum over its instances, so no single instance's memory layout decides."""

    def pooled(name: str) -> list[float]:
        runs = [v for k, v in samples.items() if k.split("#")[0] == name]
        return [sum(values) for values in zip(*runs)]

    return statistics.median(o / t for o, t in zip(pooled(ours), pooled(theirs)))


def total_ratio(samples: dict[str, list[float]], ours: str, theirs: str) -> float:
    """Total time of ours over total time of theirs (instances pooled): counts the rare slow steps too."""

    def total(name: str) -> float:
        return sum(sum(v) for k, v in samples.items() if k.split("#")[0] == name)

    return total(ours) / total(theirs)


def single_process(only_sentinels: bool = False) -> dict[str, list[float]]:
    """Each single-process variant three times: where tensors land in memory moves one instance's
    step time by 1-2% either way (two identical hand-written bf16 loops measured 0.987-1.006 apart)."""
    loops: dict[str, Step] = {}
    for k in range(INSTANCES):
        loops[f"b_off#{k}"] = accelify_loop(sentinels=False)
        if only_sentinels:
            loops[f"b#{k}"] = accelify_loop()
            continue
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        bf_model = make_model()
        bf_opt = torch.optim.SGD(bf_model.parameters(), lr=0.01)
        loops[f"a#{k}"] = plain_loop(model, opt, make_data())
        loops[f"b#{k}"] = accelify_loop()
        loops[f"bf16_hand#{k}"] = plain_loop(bf_model, bf_opt, make_data(), bf16=True)
        loops[f"bf16_accelify#{k}"] = accelify_loop("bf16")
    return measure(loops)


def two_process_worker(only_sentinels: bool = False) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")  # the hand-written DDP way; accelify adopts this group
    rank, world = dist.get_rank(), dist.get_world_size()
    clock: list[float] = []
    if only_sentinels:
        samples = measure({"d": accelify_loop(clock=clock), "d_off": accelify_loop(sentinels=False)})
        if rank == 0:
            ratios = {"sent": paired_ratio(samples, "d", "d_off"), "sent_total": total_ratio(samples, "d", "d_off"),
                      "sent_share": sum(clock) / sum(samples["d"]), "sent_checks": len(clock)}
            print("RESULTS " + " ".join(f"{k}={v:.9f}" for k, v in ratios.items()), flush=True)
        dist.destroy_process_group()
        return
    ddp = nn.parallel.DistributedDataParallel(make_model())
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    acc_ddp = nn.parallel.DistributedDataParallel(make_model())
    acc_opt = torch.optim.SGD(acc_ddp.parameters(), lr=0.01)
    samples = measure(
        {
            "c": plain_loop(ddp, ddp_opt, make_data((rank, world))),
            "d": accelify_loop(clock=clock),
            "accum_hand": plain_loop(acc_ddp, acc_opt, make_data((rank, world)), ddp_accum=True),
            "accum_accelify": accelify_loop(accum=ACCUM),
            "d_off": accelify_loop(sentinels=False),
        }
    )
    if rank == 0:
        ratios = {"d/c": paired_ratio(samples, "d", "c"), "accum": paired_ratio(samples, "accum_accelify", "accum_hand"),
                  "sent": paired_ratio(samples, "d", "d_off"), "sent_total": total_ratio(samples, "d", "d_off"),
                  "sent_share": sum(clock) / sum(samples["d"]), "sent_checks": len(clock)}
        medians = {k: statistics.median(v) for k, v in samples.items()}
        print("RESULTS " + " ".join(f"{k}={v:.9f}" for k, v in {**medians, **ratios}.items()), flush=True)
    dist.destroy_process_group()


def main() -> None:
    if "--cuda" in sys.argv[1:]:  # the one-GPU variants (raw vs accelify vs HF Accelerate): step_overhead_cuda.py
        import step_overhead_cuda

        sys.exit(step_overhead_cuda.main([a for a in sys.argv[1:] if a != "--cuda"]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sentinels", action="store_true", help="only the sentinels on/off comparisons")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.worker:
        two_process_worker(args.sentinels)
        return
    one = single_process(args.sentinels)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_"))}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__, "--worker",
         *(["--sentinels"] if args.sentinels else [])],
        capture_output=True, text=True, env=env, check=False,
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULTS ")), None)
    if line is None:
        sys.exit(f"the two-process run failed:\n{proc.stdout}\n{proc.stderr}")
    two = {k: float(v) for k, v in (item.split("=") for item in line.split()[1:])}
    sentinel_rows = [
        ("sentinels on/off, 1 process (median of paired ratios)", paired_ratio(one, "b", "b_off"), 1.01),
        ("sentinels on/off, 1 process (total times; after step 4 both run the same code: this is the noise)",
         total_ratio(one, "b", "b_off"), 1.01),
        ("sentinels on/off, 2 processes (median of paired ratios)", two["sent"], 1.01),
        ("sentinels on/off, 2 processes (total times)", two["sent_total"], 1.01),
    ]
    share = (f"time inside the sentinels' checks, 2 processes: {two['sent_share'] * 100:.3f}% of the measured step "
             f"time ({int(two['sent_checks'])} checks in {ROUNDS * STEPS} steps after {STEPS} warm-up steps; "
             "a longer run has fewer per step: they come at powers of two)")
    if args.sentinels:
        for label, ratio, target in sentinel_rows:
            print(f"{label}: {ratio:.4f} (target <= {target})")
        print(share)
        return
    med = {k: statistics.median(v) for k, v in one.items() if k.endswith("#0")}
    med = {k.split("#")[0]: v for k, v in med.items()}
    rows = [
        ("b/a   accelify vs plain PyTorch, 1 process", paired_ratio(one, "b", "a"), 1.03),
        ("d/c   accelify vs hand-written DDP, 2 processes", two["d/c"], 1.05),
        ("bf16  accelify vs torch.autocast by hand, 1 process", paired_ratio(one, "bf16_accelify", "bf16_hand"), 1.03),
        ("accum accelify accumulate() vs DDP no_sync by hand, 2 processes", two["accum"], 1.03),
    ]
    print(
        f"median step times (ms): a={med['a'] * 1e3:.3f} b={med['b'] * 1e3:.3f} "
        f"c={two['c'] * 1e3:.3f} d={two['d'] * 1e3:.3f}"
    )
    print("ratios: median of paired step-time ratios (steps of the compared loops alternate)")
    for label, ratio, target in rows:
        print(f"{label}: {ratio:.3f} (target <= {target})")
    for label, ratio, target in sentinel_rows:
        print(f"{label}: {ratio:.4f} (target <= {target})")
    print(share)


if __name__ == "__main__":
    main()
