"""Training that checkpoints every 4 steps and resumes from the newest checkpoint (elastic restart test).

Usage: elastic_train.py OUT_DIR [--kill-at STEP] (or ``train(out, kill_at)`` through a launcher). On
the first attempt only, rank 1 SIGKILLs itself at STEP; torch elastic restarts both workers, which
resume from the newest complete checkpoint. The main process writes the final weights to
OUT_DIR/final.pt and each attempt leaves a marker.
"""

import os
import signal
import sys
from pathlib import Path

import torch

from accelify.runtime import Accelerator

STEPS, EVERY = 16, 4


def train(out: Path, kill_at: int | None) -> None:
    """Train from the newest checkpoint in ``out/ckpt`` (if any) to STEPS; save final weights."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    acc = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # momentum: optimizer state matters
    model, optimizer = acc.prepare(model, optimizer)
    (out / f"attempt{attempt}.rank{acc.process_index}").touch()

    start = 0
    checkpoints = sorted((out / "ckpt").glob("step_*")) if (out / "ckpt").exists() else []
    if checkpoints:
        acc.load_state(checkpoints[-1])
        start = int(checkpoints[-1].name.split("_")[1])

    for step in range(start, STEPS):
        if kill_at is not None and attempt == 0 and step == kill_at and acc.process_index == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        gen = torch.Generator().manual_seed(1000 * step + acc.process_index)  # the data depends on the step only
        x = torch.randn(4, 8, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if (step + 1) % EVERY == 0:
            acc.save_state(out / "ckpt" / f"step_{step + 1:04d}")
            acc.wait_for_everyone()

    acc.wait_for_everyone()
    acc.save(acc.unwrap_model(model).state_dict(), out / "final.pt")
    acc.print(f"ELASTIC-DONE attempt {attempt} resumed from {start}")


if __name__ == "__main__":
    train(Path(sys.argv[1]), int(sys.argv[sys.argv.index("--kill-at") + 1]) if "--kill-at" in sys.argv else None)
