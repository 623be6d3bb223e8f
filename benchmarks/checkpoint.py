"""save_state + load_state vs plain torch.save + torch.load of the same model and optimizer state.

One process, a model of about 4 MB plus AdamW's 8 MB of moments. Each repetition runs both sides
back to back (alternating which goes first) into fresh paths, removed untimed afterwards. The
result is the median over repetitions of the per-pair ratio (robust when other processes share the
CPU); the ratio of medians and of minimums are printed too. Target <= 1.2. save_state does more than
torch.save: it writes separate files and RNG states, fsyncs every file (durable on power loss) and
renames the folder into place atomically.

    python benchmarks/checkpoint.py [--reps 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from accelify.runtime import Accelerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(8, 512)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    megabytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20
    megabytes += sum(t.numel() * t.element_size() for s in optimizer.state_dict()["state"].values() for t in s.values()) / 2**20

    def ours(path: Path) -> None:
        accelerator.save_state(path)
        accelerator.load_state(path)

    def plain(path: Path, durable: bool = False) -> None:
        with open(path, "wb") as fh:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, fh)
            if durable:  # what save_state adds on top: the data is on disk before save returns
                fh.flush()
                os.fsync(fh.fileno())
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    def plain_fsync(path: Path) -> None:
        plain(path, durable=True)

    names = ["save_state+load_state", "torch.save+torch.load", "same, with fsync"]
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP", ".")) as tmp:
        for fn in (ours, plain):  # warm-up
            fn(Path(tmp) / f"warm-{fn.__name__}")
        for rep in range(args.reps):
            order = list(zip((ours, plain, plain_fsync), names))
            for fn, name in order if rep % 2 == 0 else order[::-1]:
                path = Path(tmp) / f"{name}-{rep}"
                start = time.perf_counter()
                fn(path)
                times[name].append(time.perf_counter() - start)
                shutil.rmtree(path) if path.is_dir() else path.unlink()

    print(f"state: {megabytes:.1f} MB (model + AdamW), {args.reps} repetitions, one process")
    for name, values in times.items():
        print(f"{name:24s} median {statistics.median(values) * 1e3:7.2f} ms   min {min(values) * 1e3:7.2f} ms")
    ours_all, plain_all, durable_all = times.values()
    paired = statistics.median(a / b for a, b in zip(ours_all, plain_all))
    of_medians = statistics.median(ours_all) / statistics.median(plain_all)
    print(f"ratio {paired:.2f} (median of paired ratios; of medians {of_medians:.2f}, of minimums "
          f"{min(ours_all) / min(plain_all):.2f})   target <= 1.2")
    durable = statistics.median(a / b for a, b in zip(ours_all, durable_all))
    print(f"ratio vs torch.save+fsync+torch.load {durable:.2f} (the price of atomic folders and separate files alone)")


if __name__ == "__main__":
    main()
