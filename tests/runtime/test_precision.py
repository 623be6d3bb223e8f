"""Mixed precision on the CPU: bf16 really applies, fp16 scales and skips overflowing steps."""

from __future__ import annotations

import copy
import gc
import inspect
import pickle
import warnings
import weakref

import pytest
import torch
from torch import nn

from accelify.runtime import Accelerator, AutocastKwargs, ConfigurationError, GradScalerKwargs
from accelify.runtime import precision


def _inner_dtypes(model: nn.Sequential) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    return seen


def test_bf16_applies_on_cpu_and_returns_fp32() -> None:
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    seen = _inner_dtypes(model)
    prepared = acc.prepare(model)
    out = prepared(torch.randn(3, 4))
    assert seen == [torch.bfloat16] and out.dtype == torch.float32
    assert acc.scaler is None
    with acc.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with acc.autocast(AutocastKwargs(enabled=False)):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    # forward is wrapped on the instance (the class is untouched); it pickles, copies and unwraps cleanly
    assert acc.unwrap_model(prepared) is model and type(model) is nn.Sequential
    assert isinstance(vars(model)["forward"], precision.AutocastForward)
    assert str(inspect.signature(model.forward)) == "(input)"  # the real arguments stay visible
    plain = acc.prepare(nn.Linear(4, 2))
    clone = pickle.loads(pickle.dumps(plain))
    assert clone(torch.randn(1, 4)).dtype == torch.float32 and precision.find_autocast(clone) is not None
    for copied in (clone, copy.deepcopy(plain)):  # a copy has a forward of its own, still running in bf16
        wrapper = precision.find_autocast(copied)
        assert wrapper not in (None, precision.find_autocast(plain)) and wrapper.module is copied
        during: list[bool] = []
        copied.register_forward_pre_hook(lambda mod, args: during.append(torch.is_autocast_enabled("cpu")))
        assert copied(torch.randn(1, 4)).dtype == torch.float32 and during == [False]  # hooks run outside
        assert not torch.is_autocast_enabled("cpu")
        copied.weight.data.zero_()
        assert torch.equal(copied(torch.ones(1, 4)), copied.bias.detach().float().reshape(1, 2).bfloat16().float())
    wrapper = precision.find_autocast(model)
    acc.prepare(model)  # preparing again wraps nothing twice
    assert precision.find_autocast(model) is wrapper and wrapper.__wrapped__.__func__ is nn.Sequential.forward
    # the wrapper holds its module weakly: deleting the last reference frees the model without a gc pass
    gc.disable()
    try:
        doomed = nn.Linear(4, 2)
        precision.attach_autocast(doomed, "bf16", torch.device("cpu"))
        alive = weakref.ref(doomed)
        orphan = doomed.forward
        del doomed
        assert alive() is None
        with pytest.raises(ReferenceError, match="module that was deleted"):
            orphan(torch.randn(1, 4))
    finally:
        gc.enable()
    acc.unwrap_model(prepared, keep_fp32_wrapper=False)
    seen.clear()
    model(torch.randn(1, 4))
    assert seen == [torch.float32] and "forward" not in vars(model)


def test_autocast_is_restored_when_forward_raises() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    acc = Accelerator(cpu=True, mixed_precision="bf16")
    model = acc.prepare(Boom())
    with pytest.raises(ValueError, match="boom"):
        model(torch.ones(1))
    assert not torch.is_autocast_enabled("cpu")


def _train(mixed_precision: str, steps: int = 30) -> list[float]:
    torch.manual_seed(0)
    acc = Accelerator(cpu=True, mixed_precision=mixed_precision)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = acc.prepare(model, opt)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        acc.backward(loss)
        opt.step()
        losses.append(loss.item())
    return losses


def test_fp16_on_cpu_trains_like_fp32() -> None:
    """torch 2.13 supports fp16 autocast and GradScaler on the CPU: allowed, and numerically sane."""
    fp32, fp16 = _train("no"), _train("fp16")
    assert fp16[-1] < fp16[0] * 0.9
    assert abs(fp16[-1] - fp32[-1]) < 0.02, (fp16[-1], fp32[-1])


def test_fp16_overflow_skips_the_step_and_the_scheduler() -> None:
    acc = Accelerator(cpu=True, mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)])
    assert acc.scaler.get_scale() == 1024.0
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    model, opt, sched = acc.prepare(model, opt, sched)
    before = [p.detach().clone() for p in model.parameters()]
    acc.backward(model(torch.ones(1, 2)).sum() * float("inf"))
    opt.step()
    sched.step()
    assert acc.optimizer_step_was_skipped and opt.step_was_skipped
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert sched.get_last_lr() == [0.5] and acc.scaler.get_scale() == 512.0
    opt.zero_grad()
    acc.backward(model(torch.ones(1, 2)).sum())
    norm = acc.clip_grad_norm_(model.parameters(), 100.0)  # unscaled before clipping
    assert torch.isclose(norm, torch.tensor(3.0**0.5), atol=1e-3), norm
    acc.clip_grad_norm_(model.parameters(), 100.0)  # a second clip in the same step is fine
    opt.step()
    sched.step()
    assert not acc.optimizer_step_was_skipped and sched.get_last_lr() == [0.25]
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_mixed_precision_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="use one of no, fp16, bf16"):
        precision.check_mixed_precision("fp8", torch.device("cpu"))
    assert precision.check_mixed_precision(None, torch.device("cpu")) == "no"
    assert precision.check_mixed_precision("BF16", torch.device("cpu")) == "bf16"

    real = torch.autocast

    def unsupported(device_type: str, dtype: torch.dtype | None = None, **kwargs: object) -> object:
        return real(device_type, dtype=torch.float64)  # torch warns "not supported" and disables itself

    monkeypatch.setattr(precision.torch, "autocast", unsupported)
    with pytest.raises(ConfigurationError, match="silently run in fp32"):
        precision.check_mixed_precision("fp16", torch.device("cpu"))


def test_to_fp32_keeps_structure() -> None:
    half = torch.ones(1, dtype=torch.float16)
    out = precision.to_fp32({"a": (half, [half]), "n": torch.ones(1, dtype=torch.int64), "s": "x"})
    assert out["a"][0].dtype == torch.float32 and out["a"][1][0].dtype == torch.float32
    assert out["n"].dtype == torch.int64 and out["s"] == "x"


def test_fp16_step_keeps_a_patch_made_after_wrapping() -> None:
    # an LR scheduler built on the raw optimizer after prepare() patches optimizer.step; the fp16 step must keep it
    torch.manual_seed(0)
    acc = Accelerator(cpu=True, mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1.0)])
    model = nn.Linear(2, 1)
    raw = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, raw)
    scheduler = torch.optim.lr_scheduler.StepLR(raw, 1, gamma=0.5)
    before = model.weight.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "optimizer.step() has been overridden after ..." would fail here
        acc.backward(model(torch.ones(1, 2)).sum())
        optimizer.step()
        scheduler.step()
    assert hasattr(raw.step, "_wrapped_by_lr_sched") and not acc.optimizer_step_was_skipped
    assert not torch.equal(model.weight, before) and scheduler.get_last_lr() == [0.05]
    other = nn.Linear(2, 1)
    plain = torch.optim.SGD(other.parameters(), lr=0.1)
    other, wrapped = acc.prepare(other, plain)
    acc.backward(other(torch.ones(1, 2)).sum())
    wrapped.step()
    assert "step" not in vars(plain)  # nothing left behind on an optimizer that had no patch of its own
