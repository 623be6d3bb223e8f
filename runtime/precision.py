"""Mixed precision: autocast around a prepared model's forward, fp32 outputs, and the fp16 GradScaler.

``"bf16"`` runs the forward under ``torch.autocast(device, torch.bfloat16)`` and really applies on
the CPU (Hugging Face Accelerate 1.15 with ``cpu=True`` silently stays in fp32). ``"fp16"`` adds a
``torch.amp.GradScaler``. Which precision a device may run is one rule, stated in
:func:`accelify.runtime.precision_rules.check_mixed_precision` and applied by every entry point: fp16 and
bf16 wherever torch's autocast runs them (the CPU included: slow for fp16, but numerically sane),
a :class:`ConfigurationError` elsewhere, never a silent fp32 run.
"""

from __future__ import annotations

import contextlib
import types
import weakref
from typing import Any

import torch

from .precision_rules import check_mixed_precision  # noqa: F401  (the one rule; tests and older callers find it here)
from .precision_rules import MIXED_PRECISION_CHOICES, dtype_name, grad_scaler_plan


def torch_dtype(name: str) -> torch.dtype | None:
    """The torch dtype of a precision or dtype spelling (``"bf16"``, ``"bfloat16"``), by
    :data:`~.precision_rules.PRECISION_DTYPES`, the one table; ``"no"`` -> None."""
    found = dtype_name(name)
    return None if found is None else getattr(torch, found)


DTYPES = {name: torch_dtype(name) for name in MIXED_PRECISION_CHOICES if name != "no"}  # "fp16": torch.float16


def autocast(mixed_precision: str, device: torch.device, enabled: bool = True, cache_enabled: bool | None = None) -> Any:
    """The autocast context for ``mixed_precision`` on ``device`` (a no-op context for ``"no"``)."""
    if mixed_precision == "no" or not enabled:
        return contextlib.nullcontext()
    kwargs: dict[str, Any] = {"dtype": DTYPES[mixed_precision]}
    if cache_enabled is not None:
        kwargs["cache_enabled"] = cache_enabled
    return torch.autocast(device.type, **kwargs)


def make_grad_scaler(mixed_precision: str, device: torch.device, options: dict[str, Any] | None = None) -> Any:
    """A ``torch.amp.GradScaler`` for fp16 (``options`` from ``GradScalerKwargs``), else ``None``
    (the decision: :func:`~.precision_rules.grad_scaler_plan`)."""
    plan = grad_scaler_plan(mixed_precision, device.type, options)
    return None if plan is None else torch.amp.GradScaler(**plan)


def to_fp32(value: Any) -> Any:
    """Cast the floating-point tensors in ``value`` (nested tuples, lists, dicts) from fp16/bf16 to fp32."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype in (torch.float16, torch.bfloat16) else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(to_fp32(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_fp32(v) for v in value)
    if isinstance(value, dict):
        out = value.copy()  # keeps dict subclasses (e.g. model-output classes)
        for k, v in value.items():
            out[k] = to_fp32(v)
        return out
    return value


class AutocastForward:
    """A prepared module's ``forward`` under mixed precision: the original forward under autocast,
    with fp16/bf16 outputs cast to fp32 (what Hugging Face Accelerate does to ``model.forward``).

    It is set as the instance attribute ``forward``, so calling the module keeps torch's fast path
    (no hooks). It holds its module weakly (no reference cycle: ``del model`` frees the model at
    once), pickles and deep-copies with its module (the copy gets its own), exposes the original
    signature through ``__wrapped__``, and :func:`detach_autocast` removes it.
    """

    __slots__ = ("_module", "original", "device_type", "dtype", "_function", "__weakref__")

    def __init__(self, module: torch.nn.Module, original: Any, device_type: str, dtype: torch.dtype) -> None:
        self._module = weakref.ref(module)
        self.original = original  # an instance-level forward it replaced (torch.compile's), or None: the class's
        self.device_type = device_type
        self.dtype = dtype
        self._function = type(module).forward if original is None else None

    @property
    def module(self) -> torch.nn.Module:
        """The module whose forward this is."""
        module = self._module()
        if module is None:
            raise ReferenceError("This forward belongs to a module that was deleted; call the module itself instead.")
        return module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype):
            if self._function is not None:
                output = self._function(self.module, *args, **kwargs)
            else:
                output = self.original(*args, **kwargs)
        return to_fp32(output)

    def __reduce__(self) -> tuple[Any, ...]:
        return (AutocastForward, (self.module, self.original, self.device_type, self.dtype))

    @property
    def __wrapped__(self) -> Any:  # inspect.signature(model.forward) shows the real arguments
        return self.original if self._function is None else types.MethodType(self._function, self.module)

    @property
    def __name__(self) -> str:
        return getattr(self.__wrapped__, "__name__", "forward")


def attach_autocast(module: torch.nn.Module, mixed_precision: str, device: torch.device) -> None:
    """Make ``module``'s forward run under autocast and return fp32 outputs (idempotent)."""
    if mixed_precision == "no" or find_autocast(module) is not None:
        return
    original = vars(module).get("forward")
    module.forward = AutocastForward(module, original, device.type, DTYPES[mixed_precision])  # type: ignore[method-assign]


def find_autocast(module: torch.nn.Module) -> AutocastForward | None:
    """The :class:`AutocastForward` attached to ``module``, if any."""
    forward = vars(module).get("forward")
    return forward if isinstance(forward, AutocastForward) else None


def detach_autocast(module: torch.nn.Module) -> None:
    """Remove what :func:`attach_autocast` added (the module then runs in fp32)."""
    forward = find_autocast(module)
    if forward is None:
        return
    if forward.original is None:
        del module.forward
    else:
        module.forward = forward.original  # type: ignore[method-assign]
