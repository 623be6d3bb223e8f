"""Launched on 2 Gloo processes by tests/runtime/test_checkpoint.py: damaged checkpoints load all or nothing.

Both processes save checkpoint_0 and checkpoint_1 (automatic naming), then for every damage case
process 0 puts a fresh copy of checkpoint_1 in place with one file truncated or deleted, and both
call ``load_state()``. Both must raise: the process that read the damaged file with a message
naming it, the folder and checkpoint_0; for a file only the other process reads (its
``random_states_<rank>.pkl``), with a ``CheckpointPeerError`` naming that process. On both, every
state (model, optimizer, scheduler, data loader, registered object, RNG, step) must be unchanged.
"""

from __future__ import annotations

import copy
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelify.runtime.checkpoint.atomic as atomic
from accelify.runtime import Accelerator, ProjectConfiguration, set_seed
from accelify.runtime.errors import CheckpointError, CheckpointPeerError


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = state["value"]


directory = Path(sys.argv[1])
config = ProjectConfiguration(project_dir=str(directory), automatic_checkpoint_naming=True, durable=False)
accelerator = Accelerator(cpu=True, project_config=config)
rank = accelerator.process_index
set_seed(0)
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.AdamW(net.parameters(), lr=0.05)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
model, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, DataLoader(data, batch_size=4, shuffle=True),
                                                          scheduler)
counter = Counter()
accelerator.register_for_checkpointing(counter)
batches = iter(loader)


def train_step() -> None:
    x, y = next(batches)
    accelerator.backward(nn.functional.mse_loss(model(x), y))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    counter.value += 1
    accelerator.step += 1


def everything() -> dict:
    return copy.deepcopy({
        "model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(), "loader": loader.state_dict(), "counter": counter.value,
        "step": accelerator.step, "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state()[1].tolist(),
    })


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


for _ in range(2):
    train_step()
    accelerator.save_state()
root = directory / "checkpoints"
pristine = directory / "pristine"
if rank == 0:
    shutil.copytree(root / "checkpoint_1", pristine)
accelerator.wait_for_everyone()
assert sorted(os.listdir(pristine)) == [
    "custom_checkpoint_0.pkl", "dl_state_dict.bin", "model.safetensors", "optimizer.bin", "random_states_0.pkl",
    "random_states_1.pkl", "scheduler.bin"], os.listdir(pristine)
train_step()  # every state moves on from what checkpoint_1 holds

cases = [(name, damage) for name in sorted(os.listdir(pristine)) for damage in ("truncated", "missing")
         if (name, damage) != ("dl_state_dict.bin", "missing")]  # a checkpoint without loader state loads
for name, damage in cases:
    if rank == 0:
        shutil.rmtree(root / "checkpoint_1")
        shutil.copytree(pristine, root / "checkpoint_1")
        target = root / "checkpoint_1" / name
        if damage == "missing":
            target.unlink()
        else:
            os.truncate(target, target.stat().st_size - 10)
    accelerator.wait_for_everyone()
    before = everything()
    owner = int(name[len("random_states_"):-len(".pkl")]) if name.startswith("random_states_") else rank
    try:
        accelerator.load_state()
    except CheckpointPeerError as exc:
        assert owner != rank, (name, damage, rank, exc)
        assert f"Process {owner} could not load the checkpoint" in str(exc) and name in str(exc), (name, exc)
        assert "Nothing was loaded on any process" in str(exc), exc
    except CheckpointError as exc:
        assert owner == rank, (name, damage, rank, exc)
        assert name in str(exc) and f"Checkpoint folder: {root / 'checkpoint_1'}. Nothing was loaded" in str(exc), exc
        assert f"accelerator.load_state('{root / 'checkpoint_0'}')" in str(exc), exc
    else:
        raise AssertionError(f"process {rank} loaded a checkpoint with {name} {damage}")
    assert same(everything(), before), f"process {rank}: a failed load changed some state ({name} {damage})"
    accelerator.wait_for_everyone()  # everyone is done with this copy before process 0 replaces it

if rank == 0:
    shutil.rmtree(root / "checkpoint_1")
    shutil.copytree(pristine, root / "checkpoint_1")
accelerator.wait_for_everyone()
accelerator.load_state()  # the intact checkpoint loads on both
assert counter.value == 2 and accelerator.step == 2, (counter.value, accelerator.step)
atomic.wait_background()
print(f"rank {rank}: CHECKPOINT-FAULTS OK ({len(cases)} cases)", flush=True)
