"""The runtime's sentinels (runtime/sentinels.py): one process in-process, two Gloo processes through one worker."""

from __future__ import annotations

import copy
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelify.runtime import Accelerator, ConfigurationError, SentinelWarning
from accelify.runtime.launch_settings import sentinels_enabled
from accelify.runtime.sentinels import fingerprint, first_difference

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.multiprocess
def test_two_processes(run_distributed) -> None:  # type: ignore[no-untyped-def]
    """Diverged parameters raise naming the model and the step; right runs (plain, accumulation, a per-batch
    scheduler) say nothing; no gradients and a prepared per-epoch scheduler warn once; switched off, nothing."""
    proc = run_distributed(WORKERS / "sentinel_checks.py")
    assert proc.stdout.count("SENTINEL-WORKER-OK") == 2, proc.stdout + proc.stderr


@pytest.fixture(autouse=True)
def _sentinels_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELIFY_SENTINELS", raising=False)


def _caught(body: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        body()
    return [str(w.message) for w in caught if issubclass(w.category, SentinelWarning)]


def _loop(model: nn.Module, optimizer: Any, acc: Accelerator, steps: int, backward: bool = True) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(torch.ones(2, 3)).sum()
        if backward:
            acc.backward(loss)
        optimizer.step()


# -- the switch ------------------------------------------------------------------------------------
def test_on_by_default_off_by_argument_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Accelerator(cpu=True)._sentinels is not None
    assert Accelerator(cpu=True, sentinels=False)._sentinels is None
    monkeypatch.setenv("ACCELIFY_SENTINELS", "0")
    assert Accelerator(cpu=True)._sentinels is None
    assert Accelerator(cpu=True, sentinels=True)._sentinels is not None  # the argument wins
    monkeypatch.setenv("ACCELIFY_SENTINELS", "")
    assert Accelerator(cpu=True)._sentinels is not None  # empty: the default
    assert sentinels_enabled(None, {"ACCELIFY_SENTINELS": "off"}) is False
    assert sentinels_enabled(None, {"ACCELIFY_SENTINELS": "yes"}) is True
    with pytest.raises(ConfigurationError, match="ACCELIFY_SENTINELS='maybe'"):
        sentinels_enabled(None, {"ACCELIFY_SENTINELS": "maybe"})


# -- an optimizer stepping without gradients ---------------------------------------------------------
def test_an_optimizer_without_gradients_warns_once_naming_it() -> None:
    acc = Accelerator(cpu=True)
    generator = nn.Linear(3, 1)
    optimizer_G = torch.optim.SGD(generator.parameters(), lr=0.1)
    generator, optimizer_G = acc.prepare(generator, optimizer_G)
    found = _caught(lambda: _loop(generator, optimizer_G, acc, 20, backward=False))
    assert len(found) == 1, found
    assert found[0].startswith("`optimizer_G` stepped 3 times (its steps 2 to 4) with no gradients: its loss's "
                               "backward never reached its parameters"), found
    assert "sentinels=False" in found[0]


def test_no_warning_for_gradients_frozen_parameters_or_one_early_step_without_gradients() -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    assert _caught(lambda: _loop(model, optimizer, acc, 10)) == []

    frozen = nn.Linear(3, 1).requires_grad_(False)  # a backbone frozen on purpose, its optimizer still stepped
    frozen_optimizer = torch.optim.SGD(frozen.parameters(), lr=0.1)
    frozen, frozen_optimizer = acc.prepare(frozen, frozen_optimizer)
    assert _caught(lambda: _loop(frozen, frozen_optimizer, acc, 10, backward=False)) == []

    late = nn.Linear(3, 1)
    late_optimizer = torch.optim.SGD(late.parameters(), lr=0.1)
    late, late_optimizer = acc.prepare(late, late_optimizer)

    def one_step_first() -> None:  # the step some scripts take before training (to silence a scheduler warning)
        late_optimizer.step()
        _loop(late, late_optimizer, acc, 10)

    assert _caught(one_step_first) == []


def test_steps_skipped_under_accumulation_or_by_the_fp16_scaler_do_not_count() -> None:
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    for _ in range(8):
        with acc.accumulate(model):
            acc.backward(model(torch.ones(2, 3)).sum())
            optimizer.step()
            optimizer.zero_grad()
    assert optimizer._steps_taken == 4

    fp16 = Accelerator(cpu=True, mixed_precision="fp16")
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fp16.prepare(model, optimizer)
    fp16.backward(model(torch.ones(2, 3)).sum() * float("inf"))
    optimizer.step()
    assert fp16.optimizer_step_was_skipped and optimizer._steps_taken == 0


def test_switched_off_nothing_is_watched() -> None:
    acc = Accelerator(cpu=True, sentinels=False)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    assert _caught(lambda: _loop(model, optimizer, acc, 10, backward=False)) == []
    assert optimizer._sentinel is None and optimizer._sentinel_at == 0


# -- names, copies, one process ------------------------------------------------------------------------
class _Trainer:
    def __init__(self, acc: Accelerator) -> None:
        self.encoder = nn.Linear(3, 1)
        self.opt = torch.optim.SGD(self.encoder.parameters(), lr=0.1)
        self.encoder, self.opt = acc.prepare(self.encoder, self.opt)


def test_objects_are_named_by_the_callers_variable_else_their_class() -> None:
    acc = Accelerator(cpu=True)
    netD = nn.Linear(3, 1)
    optimizer_D = torch.optim.SGD(netD.parameters(), lr=0.1)
    netD, optimizer_D = acc.prepare(netD, optimizer_D)
    anonymous = acc.prepare(torch.optim.Adam(netD.parameters()))
    trainer = _Trainer(acc)
    names = acc._sentinels.names
    assert names[id(netD)] == "netD" and names[id(optimizer_D)] == "optimizer_D"
    assert names[id(anonymous)] == "Adam"
    assert names[id(trainer.encoder)] == "self.encoder" and names[id(trainer.opt)] == "self.opt"


def test_a_copy_of_a_prepared_optimizer_or_scheduler_is_not_watched() -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    assert optimizer._sentinel is not None
    assert scheduler._sentinel is None  # one process: a scheduler moves one step per call, nothing to watch
    for copied in (pickle.loads(pickle.dumps(optimizer)), copy.deepcopy(optimizer)):
        assert copied._sentinel is None and copied._sentinel_at == 0
    copied_scheduler = copy.deepcopy(scheduler)
    assert copied_scheduler._sentinel is None and copied_scheduler._calls == 0


# -- the fingerprint -----------------------------------------------------------------------------------
def test_fingerprint_finds_the_first_differing_parameter_and_ignores_what_agrees() -> None:
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(300, 200), nn.ReLU(), nn.Linear(200, 5))
    b = copy.deepcopy(a)
    names, mine = fingerprint(a)
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"] and len(mine) == 3 * 4
    assert first_difference(mine, fingerprint(b)[1]) is None
    with torch.no_grad():
        b[2].weight.add_(1e-3)
    assert first_difference(mine, fingerprint(b)[1]) == 2
    assert first_difference(mine, mine[:-3]) == 0  # shapes differ
    nan = [float("nan")] * 3
    assert first_difference(nan, nan) is None  # diverged alike everywhere: not a disagreement
    inf = [float("inf"), float("inf"), 3.0]
    assert first_difference(inf, inf) is None and first_difference(inf, [1.0, 1.0, 3.0]) == 0


def test_many_tensors_are_grouped() -> None:
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(100)])  # 200 tensors
    names, values = fingerprint(model)
    assert len(names) == 50 and len(values) == 150  # 4 tensors per group
    assert names[1] == "2.weight` to `3.bias" and names[-1] == "98.weight` to `99.bias"


# -- a prepared scheduler stepped per epoch: the watch on its own, as process 0 of 2 (no process group needed) --
def _scheduler_warnings(pattern: str, accumulation: int = 1, epochs: int = 4, metric: float | None = None,
                        **options: Any) -> list[str]:
    """Train ``epochs`` passes over a 10-batch shard and step the scheduler as ``pattern`` says."""
    from torch.utils.data import DataLoader

    from accelify.runtime import AcceleratedOptimizer, AcceleratedScheduler, GradientState, prepare_data_loader
    from accelify.runtime.accumulation import Accumulate
    from accelify.runtime.prepared import PreparedObjects
    from accelify.runtime.sentinels import Sentinels

    state = GradientState(accumulation)
    prepared = PreparedObjects()
    sentinels = Sentinels(prepared, num_processes=2, process_index=0, gradient_state=state)
    train_loader = prepare_data_loader(DataLoader(range(40), batch_size=2), num_processes=2, process_index=0,
                                       put_on_device=False)
    prepared.dataloaders.append(train_loader)
    sentinels.remember(train_loader, train_loader)
    optimizer = AcceleratedOptimizer(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1), gradient_state=state)
    raw = options.pop("scheduler", None) or torch.optim.lr_scheduler.StepLR(optimizer.optimizer, step_size=1)
    scheduler = AcceleratedScheduler(raw, [optimizer], gradient_state=state, num_processes=2, **options)
    sentinels.remember(scheduler, scheduler)
    sentinels.watch_scheduler(scheduler)

    def train() -> None:
        for _ in range(epochs):
            if pattern == "epoch start":
                scheduler.step()
            for i, _batch in enumerate(train_loader):
                with Accumulate(state, ()):
                    optimizer.step()
                    if pattern == "batch" or (pattern == "every 10 batches" and i % 10 == 9):
                        scheduler.step()
            if pattern == "epoch end":
                scheduler.step(*([] if metric is None else [metric]))

    return _caught(train)


def test_a_prepared_scheduler_stepped_per_epoch_warns_once_naming_it() -> None:
    found = _scheduler_warnings("epoch end")
    assert len(found) == 1, found
    assert found[0].startswith("Scheduler `scheduler` is stepped once per epoch (every 10 optimizer steps, once per "
                               "pass over `train_loader`) but was passed to prepare: on 2 processes it moves 2 steps "
                               "per call, so its schedule runs 2 times too fast. Do not pass it to prepare"), found
    assert len(_scheduler_warnings("epoch end", epochs=2)) == 1  # the first gap is measured from prepare
    assert len(_scheduler_warnings("epoch start")) == 1  # stepped before each pass: seen at the third call
    accumulated = _scheduler_warnings("epoch end", accumulation=3)
    assert len(accumulated) == 1 and "every 4 optimizer steps" in accumulated[0]  # 10 batches, 3 per step


def test_no_warning_per_batch_every_k_batches_or_where_a_call_moves_one_step() -> None:
    assert _scheduler_warnings("batch") == []
    assert _scheduler_warnings("batch", accumulation=2) == []
    assert _scheduler_warnings("every 10 batches") == []  # inside the loop, even every epoch-length: right
    assert _scheduler_warnings("epoch end", epochs=1) == []  # one call: nothing to compare yet
    assert _scheduler_warnings("epoch end", split_batches=True) == []  # one step per call: right
    assert _scheduler_warnings("epoch end", step_with_optimizer=False) == []
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1))
    assert _scheduler_warnings("epoch end", scheduler=plateau, metric=1.0) == []
