"""Launched on 2 Gloo processes by tests/runtime/test_checkpoint.py; asserts inside the workers.

``first DIR``: train N steps, saving automatically named checkpoints after steps 1..K (total_limit=2),
logging to a JSONL tracker; records every loss and the final weights in DIR/expected_<rank>.pt.
``resume DIR``: a fresh process loads the newest checkpoint, skips the consumed batches and trains
the remaining steps; losses and weights must equal the recorded ones bitwise. Then a save that fails
on rank 1 must leave the previous checkpoint intact on both ranks, and a background fsync that fails
on rank 0 must fail the next save on both ranks.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelify.runtime.checkpoint.atomic as atomic
import accelify.runtime.checkpoint.layout as ckpt_files
from accelify.runtime import Accelerator, ProjectConfiguration, set_seed
from accelify.runtime.checkpoint import CheckpointError

N_STEPS, K_SAVED = 7, 3  # 4 batches per process per epoch: resume mid-epoch 0, then cross into epoch 1


class StepCounter:
    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def build(directory: Path, seed: int) -> tuple[Accelerator, nn.Module, object, object, object, StepCounter]:
    config = ProjectConfiguration(project_dir=str(directory), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config, log_with="jsonl")
    set_seed(seed)
    model = nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.3), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 5, generator=g), torch.randn(32, 1, generator=g))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    counter = StepCounter()
    accelerator.register_for_checkpointing(counter)
    return accelerator, model, optimizer, loader, scheduler, counter


def batches(accelerator: Accelerator, loader: object, skip: int):
    """Yield batches forever across epochs, starting ``skip`` batches into the current epoch."""
    first = accelerator.skip_first_batches(loader, skip) if skip else loader
    yield from first
    while True:
        yield from loader


def train_step(accelerator, model, optimizer, scheduler, counter, x, y) -> float:
    noise = 1e-3 * (random.random() + float(np.random.rand()))  # Python and NumPy RNGs matter too
    loss = nn.functional.mse_loss(model(x), y) + noise
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    counter.step += 1
    return loss.item()


def first(directory: Path) -> None:
    accelerator, model, optimizer, loader, scheduler, counter = build(directory, seed=1234)
    rank = accelerator.process_index
    accelerator.init_trackers("run", config={"lr": 0.02, "steps": N_STEPS})
    losses = []
    stream = batches(accelerator, loader, 0)
    for step in range(N_STEPS):
        x, y = next(stream)
        losses.append(train_step(accelerator, model, optimizer, scheduler, counter, x, y))
        accelerator.log({"loss": losses[-1]}, step=step)
        if counter.step <= K_SAVED:
            path = accelerator.save_state()
            assert path.name == f"checkpoint_{counter.step - 1}", path
    root = directory / "checkpoints"
    atomic.wait_background()  # rank 0 prunes once the newest checkpoint is on disk
    accelerator.wait_for_everyone()
    assert sorted(os.listdir(root)) == ["checkpoint_1", "checkpoint_2"], os.listdir(root)
    files = sorted(os.listdir(root / "checkpoint_2"))
    assert files == [
        "custom_checkpoint_0.pkl", "dl_state_dict.bin", "model.safetensors", "optimizer.bin",
        "random_states_0.pkl", "random_states_1.pkl", "scheduler.bin",
    ], files
    torch.save({"losses": losses, "weights": accelerator.unwrap_model(model).state_dict()}, directory / f"expected_{rank}.pt")
    accelerator.end_training()
    metrics = directory / "run" / "metrics.jsonl"
    if rank == 0:
        lines = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert [r["step"] for r in lines] == list(range(N_STEPS)) and lines[0]["loss"] == losses[0], lines
        assert json.loads((directory / "run" / "config.json").read_text()) == {"lr": 0.02, "steps": N_STEPS}
    print(f"rank {rank}: FIRST OK", flush=True)


def resume(directory: Path) -> None:
    accelerator, model, optimizer, loader, scheduler, counter = build(directory, seed=999)  # different init on purpose
    rank = accelerator.process_index
    expected = torch.load(directory / f"expected_{rank}.pt", weights_only=True)
    accelerator.load_state()  # the newest: checkpoint_2, written after step K_SAVED
    assert counter.step == K_SAVED, counter.step
    assert accelerator.project_configuration.iteration == 3
    losses = expected["losses"][:K_SAVED]
    stream = batches(accelerator, loader, counter.step)
    for _ in range(N_STEPS - K_SAVED):
        x, y = next(stream)
        losses.append(train_step(accelerator, model, optimizer, scheduler, counter, x, y))
    assert losses == expected["losses"], (losses, expected["losses"])
    for name, tensor in accelerator.unwrap_model(model).state_dict().items():
        assert torch.equal(tensor, expected["weights"][name]), name

    # A save that fails on rank 1 only: both ranks raise, the previous checkpoint stays complete.
    target = directory / "explicit"
    accelerator.save_state(target)
    saved = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    x, y = next(stream)
    train_step(accelerator, model, optimizer, scheduler, counter, x, y)
    real_write = ckpt_files.write_state
    if rank == 1:
        ckpt_files.write_state = lambda path, obj: (_ for _ in ()).throw(OSError(28, "No space left on device"))
    try:
        accelerator.save_state(target)
    except (OSError, CheckpointError) as exc:
        assert ("No space left" in str(exc)) if rank == 1 else ("Another process failed" in str(exc)), exc
    else:
        raise AssertionError("the failed save did not raise")
    ckpt_files.write_state = real_write
    accelerator.wait_for_everyone()
    listing = sorted(p.name for p in directory.iterdir() if "explicit" in p.name)
    assert listing == ["explicit"], listing
    accelerator.wait_for_everyone()  # everyone looked before rank 0 stages the next save
    accelerator.load_state(target)
    for name, tensor in accelerator.unwrap_model(model).state_dict().items():
        assert torch.equal(tensor, saved[name]), name

    # The background fsync fails on rank 0: save_state returned, the next save fails on both ranks.
    real_fsync = atomic.fsync_path
    if rank == 0:
        atomic.fsync_path = lambda path: (_ for _ in ()).throw(OSError(5, "Input/output error"))
    accelerator.save_state(target)
    try:
        accelerator.save_state(target)
    except OSError as exc:
        expected_text = "could not be flushed to the disk" if rank == 0 else "Process(es) 0 could not start saving"
        assert expected_text in str(exc), exc
    else:
        raise AssertionError("the failed background fsync was not reported")
    atomic.fsync_path = real_fsync
    accelerator.save_state(target)  # the disk works again
    atomic.wait_background()
    accelerator.wait_for_everyone()
    listing = sorted(p.name for p in directory.iterdir() if "explicit" in p.name)
    assert listing == ["explicit"], listing
    accelerator.end_training()
    print(f"rank {rank}: RESUME OK", flush=True)


if __name__ == "__main__":
    phase, where = sys.argv[1], Path(sys.argv[2])
    {"first": first, "resume": resume}[phase](where)
