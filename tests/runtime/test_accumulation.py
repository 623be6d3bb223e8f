"""Gradient accumulation and scheduler semantics, on one process and (one launch) on two."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import AcceleratedScheduler, Accelerator, GradientState

WORKERS = Path(__file__).parent / "workers"


def test_k_micro_batches_equal_one_big_batch() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(12, 3), torch.randn(12, 1)
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, reference = nn.Linear(3, 1), nn.Linear(3, 1)
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    model, opt, loader, sched = acc.prepare(model, opt, DataLoader(TensorDataset(x, y), batch_size=3), sched)
    syncs = []
    for bx, by in loader:
        with acc.accumulate(model):
            acc.backward(nn.functional.mse_loss(model(bx), by))
            syncs.append(acc.sync_gradients)
            opt.step()
            sched.step()
            if not acc.sync_gradients:
                assert model.weight.grad is not None
            opt.zero_grad()
            if not acc.sync_gradients:
                assert model.weight.grad is not None  # zero_grad waits for the boundary
    assert syncs == [False, True, False, True]
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=1, gamma=0.9)
    for start in (0, 6):
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x[start : start + 6]), y[start : start + 6]).backward()
        ref_opt.step()
        ref_sched.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert sched.get_last_lr() == ref_sched.get_last_lr()
    assert sched.scheduler._step_count == 1 + 4  # accumulation steps still count (Accelerate's adjust_scheduler)


def test_last_batch_of_the_loader_synchronises() -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = acc.prepare(nn.Linear(1, 1))
    loader = acc.prepare(DataLoader(torch.ones(5, 1), batch_size=1))
    pattern = []
    for batch in loader:
        with acc.accumulate(model):
            pattern.append(acc.sync_gradients)
    assert pattern == [False, True, False, True, True]
    # outside a loader, only the count matters; a second accelerator has its own state
    other = Accelerator(cpu=True, gradient_accumulation_steps=3)
    with other.accumulate(model):
        assert not other.sync_gradients
    assert acc.sync_gradients


class _Opt:
    def __init__(self, skipped: bool = False) -> None:
        self.step_was_skipped = skipped


def _sched(**kwargs: object) -> tuple[AcceleratedScheduler, torch.optim.lr_scheduler.LRScheduler]:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    inner = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return AcceleratedScheduler(inner, kwargs.pop("optimizers", _Opt()), **kwargs), inner  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:Detected call of")  # these schedulers' optimizers never step
def test_scheduler_steps_once_per_process() -> None:
    sched, inner = _sched(num_processes=2)
    sched.step()
    assert inner.last_epoch == 2 and sched.get_last_lr() == [0.25]
    sched, inner = _sched(num_processes=2, split_batches=True)
    sched.step()
    assert inner.last_epoch == 1
    sched, inner = _sched(num_processes=2, optimizers=[_Opt(skipped=True)])
    sched.step()
    assert inner.last_epoch == 0  # the fp16 step was skipped: the schedule waits
    state = GradientState(num_steps=2)
    state.sync_gradients = False
    sched, inner = _sched(num_processes=2, gradient_state=state)
    sched.step()
    assert inner.last_epoch == 0 and inner._step_count == 2
    sched, inner = _sched(num_processes=2, gradient_state=state, step_with_optimizer=False)
    sched.step()
    assert inner.last_epoch == 1
    assert sched.last_epoch == 1 and sched.state_dict()["last_epoch"] == 1  # other attributes pass through


def test_plateau_scheduler_steps_once_per_evaluation() -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    inner = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=2)
    state = GradientState(num_steps=2)
    sched = AcceleratedScheduler(inner, _Opt(skipped=True), num_processes=2, gradient_state=state)  # type: ignore[arg-type]
    state.sync_gradients = False  # called after an accumulation step (and a skipped fp16 step): still one evaluation
    lrs = []
    for _ in range(4):
        sched.step(1.0)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [1.0, 1.0, 1.0, 0.1]  # best, then three evaluations without improvement (patience=2)


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_one_cycle_does_not_step_past_its_end() -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    inner = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    sched = AcceleratedScheduler(inner, _Opt(), num_processes=2)  # type: ignore[arg-type]
    for _ in range(3):
        sched.step()  # 6 steps asked, OneCycleLR allows 3: no error
    assert inner._step_count == 4


@pytest.mark.multiprocess
def test_accumulation_on_two_processes(run_distributed) -> None:  # type: ignore[no-untyped-def]
    proc = run_distributed(WORKERS / "accumulation_worker.py", env={"ACCELIFY_GRADIENT_ACCUMULATION_STEPS": "2"})
    assert proc.stdout.count("ACCUMULATION-WORKER-OK") == 2, proc.stdout + proc.stderr
