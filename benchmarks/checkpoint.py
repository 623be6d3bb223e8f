"""save_state + load_state vs plain torch.save + torch.load of the same model and optimizer state.

One process, a model of about 4 MB plus AdamW's 8 MB of moments. Each repetition runs every
variant back to back (rotating which goes first) into fresh paths, removed untimed afterwards
(after waiting, untimed, for the background fsync a durable save_state leaves running):

- ``save_state+load_state``: accelify's default (durable: save_state returns once the folder is
  complete and renamed into place; a background thread fsyncs it, and deletes what it replaces
  only after that);
- ``save_state+fsync wait+load_state``: the same, also waiting for that background fsync (the
  cost if every save had to be on disk before returning);
- ``save_state, durable=False``: no fsyncs at all (``ACCELIFY_DURABLE_CHECKPOINTS=0``);
- ``torch.save+torch.load``: one file, no fsync;
- ``torch.save+fsync+torch.load``: one file, fsynced before returning.

Printed ratios are the median over repetitions of the per-repetition ratio (robust when other
processes share the CPU), with the ratio of minimums next to it. Target <= 1.2 against plain
torch.save/torch.load. save_state does more than torch.save: it writes separate files (Hugging
Face's layout) and the RNG states, and renames the folder into place atomically.

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
from typing import Callable

import torch
from torch import nn

from accelify.runtime import Accelerator
from accelify.runtime.checkpoint import atomic


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
    config = accelerator.project_configuration

    def ours(path: Path, durable: bool = True, wait: bool = False) -> None:
        config.durable = durable
        accelerator.save_state(path)
        if wait:
            atomic.wait_background()
        accelerator.load_state(path)

    def plain(path: Path, durable: bool = False) -> None:
        with open(path, "wb") as fh:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, fh)
            if durable:  # the data is on disk before save returns
                fh.flush()
                os.fsync(fh.fileno())
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    variants: dict[str, Callable[[Path], None]] = {
        "save_state+load_state": ours,
        "save_state+fsync wait+load_state": lambda path: ours(path, wait=True),
        "save_state, durable=False": lambda path: ours(path, durable=False),
        "torch.save+torch.load": plain,
        "torch.save+fsync+torch.load": lambda path: plain(path, durable=True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP", ".")) as tmp:
        for name, fn in variants.items():  # warm-up
            fn(Path(tmp) / f"warm-{len(name)}-{name[:4]}")
        names = list(variants)
        for rep in range(args.reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                path = Path(tmp) / f"{names.index(name)}-{rep}"
                start = time.perf_counter()
                variants[name](path)
                times[name].append(time.perf_counter() - start)
                atomic.wait_background()  # untimed: the next variant starts on a quiet disk
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    config.durable = True

    print(f"state: {megabytes:.1f} MB (model + AdamW), {args.reps} repetitions, one process")
    for name, values in times.items():
        print(f"{name:34s} median {statistics.median(values) * 1e3:7.2f} ms   min {min(values) * 1e3:7.2f} ms")

    def ratio(ours_name: str, plain_name: str, label: str) -> None:
        a, b = times[ours_name], times[plain_name]
        paired = statistics.median(x / y for x, y in zip(a, b))
        print(f"ratio {paired:.2f} (of minimums {min(a) / min(b):.2f})  {label}   target <= 1.2")

    ratio("save_state+load_state", "torch.save+torch.load", "save_state (default, fsync in the background) vs torch.save/torch.load")
    ratio("save_state, durable=False", "torch.save+torch.load", "save_state, durable=False vs torch.save/torch.load")
    ratio("save_state+fsync wait+load_state", "torch.save+fsync+torch.load", "save_state+waiting for its fsync vs torch.save+fsync/torch.load")


if __name__ == "__main__":
    main()
