"""Launched on 2 Gloo processes by tests/runtime/test_sentinels.py; every check asserts inside the worker.

Each scenario is a function with its own Accelerator (the process group is shared), so the sentinels see
the user's variable names in its locals. Prints "SENTINEL-WORKER-OK <rank>" at the end.
"""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import Accelerator, InitProcessGroupKwargs, ParametersDifferError, SentinelWarning

HANDLERS = [InitProcessGroupKwargs(timeout=timedelta(seconds=60))]


def data(samples: int = 16) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(samples, 4, generator=g), torch.randn(samples, 1, generator=g))


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def sentinel_warnings(caught: list[Any]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SentinelWarning)]


def correct_run(per_batch_scheduler: bool = True) -> list[str]:
    """A right DDP loop with a per-batch prepared scheduler: no warning, no error, 3 epochs of 4 steps."""
    acc = Accelerator(kwargs_handlers=HANDLERS)
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
    loader = DataLoader(data(), batch_size=2)
    net, optimizer, loader, scheduler = acc.prepare(net, optimizer, loader, scheduler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for x, y in loader:
                optimizer.zero_grad()
                acc.backward(nn.functional.mse_loss(net(x), y))
                optimizer.step()
                scheduler.step()
        acc.end_training()
    assert optimizer._steps_taken == 12
    return sentinel_warnings(caught)


def accumulation_run() -> list[str]:
    """accumulate() with 2 micro-batches and a prepared scheduler stepped per batch: no warning."""
    acc = Accelerator(kwargs_handlers=HANDLERS, gradient_accumulation_steps=2)
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3)
    loader = DataLoader(data(), batch_size=1)  # 8 batches per process, 4 optimizer steps per epoch
    net, optimizer, loader, scheduler = acc.prepare(net, optimizer, loader, scheduler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for x, y in loader:
                with acc.accumulate(net):
                    acc.backward(nn.functional.mse_loss(net(x), y))
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
        acc.end_training()
    assert optimizer._steps_taken == 12, optimizer._steps_taken  # steps skipped under accumulation do not count
    return sentinel_warnings(caught)


def free_memory_run() -> list[str]:
    """Two models trained one after the other with free_memory between: the second is compared with itself only."""
    acc = Accelerator(kwargs_handlers=HANDLERS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for seed in (0, 1):
            torch.manual_seed(seed)
            net = nn.Linear(4, 1)
            optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
            net, optimizer = acc.prepare(net, optimizer)
            for _ in range(4):
                optimizer.zero_grad()
                acc.backward(net(torch.ones(2, 4)).sum())
                optimizer.step()
            net, optimizer = acc.free_memory(net, optimizer)
        acc.end_training()
    assert next(acc._sentinels.numbers) == 2  # each model checked under its own number
    return sentinel_warnings(caught)


def diverged_run(rank: int, sentinels: bool | None = None) -> str | None:
    """Process 1 changes a weight outside DDP after step 2: the check after step 4 names `net` and step 4."""
    acc = Accelerator(kwargs_handlers=HANDLERS, sentinels=sentinels)
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    loader = DataLoader(data(), batch_size=2)
    net, optimizer, loader = acc.prepare(net, optimizer, loader)
    caught: ParametersDifferError | None = None
    try:
        for step, (x, y) in enumerate(loader, start=1):  # 4 steps per process
            optimizer.zero_grad()
            acc.backward(nn.functional.mse_loss(net(x), y))
            optimizer.step()
            if step == 2:
                with torch.no_grad():
                    net.module[2].weight.add_(rank)
    except ParametersDifferError as error:
        caught = error
    try:
        acc.end_training()  # both processes reach its barrier, whichever step raised first
    except ParametersDifferError as error:
        caught = caught or error
    return None if caught is None else str(caught)


def extra_step_run(rank: int) -> str:
    """Process 1 takes one more step than process 0, through the module inside DDP: end_training counts both."""
    acc = Accelerator(kwargs_handlers=HANDLERS)
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    net, optimizer = acc.prepare(net, optimizer)
    x, y = data(2).tensors
    for _ in range(3):
        optimizer.zero_grad()
        acc.backward(nn.functional.mse_loss(net(x), y))
        optimizer.step()
    if rank == 1:  # a step only this process takes, outside DDP (no all-reduce to wait for)
        optimizer.zero_grad()
        nn.functional.mse_loss(net.module(x), y).backward()
        optimizer.step()
    try:
        acc.end_training()
    except ParametersDifferError as error:
        return str(error)
    raise AssertionError("an extra step on one process was not caught")


def no_gradient_run(sentinels: bool | None = None) -> list[str]:
    """A GAN-like loop whose generator's loss never reaches it (the fake batch is detached)."""
    acc = Accelerator(kwargs_handlers=HANDLERS, sentinels=sentinels)
    torch.manual_seed(0)
    netG, netD = nn.Linear(2, 4), nn.Linear(4, 1)
    optimizer_G = torch.optim.Adam(netG.parameters())
    optimizer_D = torch.optim.Adam(netD.parameters())
    netG, netD, optimizer_G, optimizer_D = acc.prepare(netG, netD, optimizer_G, optimizer_D)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            fake = netG(torch.randn(3, 2)).detach()  # the mistake
            optimizer_D.zero_grad()
            acc.backward(netD(fake).mean())
            optimizer_D.step()
            optimizer_G.zero_grad()
            acc.backward(-netD(fake).mean())
            optimizer_G.step()
        acc.end_training()
    return sentinel_warnings(caught)


def per_epoch_run(inside_loop: bool = False, sentinels: bool | None = None) -> list[str]:
    """A prepared scheduler stepped after each epoch (or, ``inside_loop``, on each epoch's last batch)."""
    acc = Accelerator(kwargs_handlers=HANDLERS, sentinels=sentinels)
    net = make_net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_loader = DataLoader(data(), batch_size=2)  # 4 batches per process
    net, optimizer, train_loader, scheduler = acc.prepare(net, optimizer, train_loader, scheduler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            for i, (x, y) in enumerate(train_loader):
                optimizer.zero_grad()
                acc.backward(nn.functional.mse_loss(net(x), y))
                optimizer.step()
                if inside_loop and i % 4 == 3:  # every 4 batches, written for any loader length: right
                    scheduler.step()
            if not inside_loop:
                scheduler.step()
        acc.end_training()
    return sentinel_warnings(caught)


def main() -> None:
    probe = Accelerator(kwargs_handlers=HANDLERS, sentinels=False)
    rank = probe.process_index
    assert probe.num_processes == 2

    assert correct_run() == [], "a right DDP run warned"
    assert accumulation_run() == [], "a right accumulation run warned"
    assert free_memory_run() == []

    message = diverged_run(rank)
    assert message is not None, "diverged parameters were not caught"
    assert message.startswith("Parameters of `net` differ between processes after step 4 of `optimizer`"), message
    assert "process 1 differs from process 0 (first difference in `2.weight`)" in message and "trained outside the prepared model" in message, message
    assert diverged_run(rank, sentinels=False) is None  # switched off: nothing
    message = extra_step_run(rank)
    assert message.startswith(f"Parameters of `net` differ between processes at end_training (after {3 + rank} steps "
                              f"of `optimizer` on process {rank}):"), message
    assert "steps of `optimizer` taken (process 0: 3, process 1: 4)" in message, message

    found = no_gradient_run()
    assert len(found) == 1, found  # once, for the generator's optimizer only
    assert found[0].startswith(f"`optimizer_G` stepped 3 times on process {rank} (its steps 2 to 4) with no gradients"), found
    assert no_gradient_run(sentinels=False) == []

    found = per_epoch_run()
    if rank == 0:
        assert len(found) == 1, found
        assert found[0].startswith(
            "Scheduler `scheduler` is stepped once per epoch (every 4 optimizer steps, once per pass over "
            "`train_loader`) but was passed to prepare: on 2 processes it moves 2 steps per call"), found
    else:
        assert found == [], found  # said once, by process 0
    assert per_epoch_run(inside_loop=True) == []  # stepped inside the loop: per batch, even every epoch-length
    assert per_epoch_run(sentinels=False) == []

    # an Accelerator made on process 0 only shifts its numbering of the store's keys: nothing matches, nothing raises
    if rank == 0:
        Accelerator(kwargs_handlers=HANDLERS)
    assert correct_run() == []
    print(f"SENTINEL-WORKER-OK {rank}", flush=True)


if __name__ == "__main__":
    main()
