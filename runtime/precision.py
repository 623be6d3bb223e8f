"""Mixed precision: autocast around a prepared model's forward, fp32 outputs, and the fp16 GradScaler.

``"bf16"`` runs the forward under ``torch.autocast(device, torch.bfloat16)`` and really applies on
the CPU (Hugging Face Accelerate 1.15 with ``cpu=True`` silently stays in fp32). ``"fp16"`` adds a
``torch.amp.GradScaler``; torch >= 2.4 supports fp16 autocast and the GradScaler on the CPU too,
so CPU fp16 is allowed (slow, but numerically sane). A device whose autocast cannot use the
requested dtype is a :class:`ConfigurationError`, never a silent fp32 run.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from .errors import ConfigurationError

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
CHOICES = ("no", "fp16", "bf16")


def check_mixed_precision(value: Any, device: torch.device) -> str:
    """Validate ``value`` for ``device`` and return it lower-cased (``"no"``, ``"fp16"`` or ``"bf16"``)."""
    text = "no" if value is None else str(getattr(value, "value", value)).lower()
    if text not in CHOICES:
        raise ConfigurationError(f"mixed_precision={value!r} is not valid; use one of {', '.join(CHOICES)}.")
    if text == "no":
        return text
    if device.type == "cuda" and text == "bf16" and not torch.cuda.is_bf16_supported():
        raise ConfigurationError(
            f"mixed_precision='bf16' needs a GPU with bfloat16 support; {torch.cuda.get_device_name(device)} has none. "
            "Use mixed_precision='fp16'."
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = torch.autocast(device.type, dtype=DTYPES[text])
    if not getattr(ctx, "_enabled", True) or any("not supported" in str(w.message) for w in caught):
        raise ConfigurationError(
            f"mixed_precision={text!r} is not supported on the {device.type} device by torch {torch.__version__} "
            "(autocast would silently run in fp32). Use mixed_precision='no' or a device that supports it."
        )
    return text


def autocast(mixed_precision: str, device: torch.device, enabled: bool = True, cache_enabled: bool | None = None) -> Any:
    """The autocast context for ``mixed_precision`` on ``device`` (a no-op context for ``"no"``)."""
    if mixed_precision == "no" or not enabled:
        return contextlib.nullcontext()
    kwargs: dict[str, Any] = {"dtype": DTYPES[mixed_precision]}
    if cache_enabled is not None:
        kwargs["cache_enabled"] = cache_enabled
    return torch.autocast(device.type, **kwargs)


def make_grad_scaler(mixed_precision: str, device: torch.device, options: dict[str, Any] | None = None) -> Any:
    """A ``torch.amp.GradScaler`` for fp16 (``options`` from ``GradScalerKwargs``), else ``None``."""
    if mixed_precision != "fp16":
        return None
    return torch.amp.GradScaler(device.type, **(options or {}))


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


class AutocastHooks:
    """Forward pre/post hooks that run a module's forward under autocast and return fp32 outputs.

    Hooks, rather than a replaced ``forward``: the module keeps its own ``forward``, pickles and
    unwraps cleanly, and the autocast state is restored even when the forward raises.
    """

    def __init__(self, device_type: str, dtype: torch.dtype) -> None:
        self.device_type = device_type
        self.dtype = dtype
        self._stack: list[Any] = []
        self.handles: list[Any] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"device_type": self.device_type, "dtype": self.dtype}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["device_type"], state["dtype"])  # type: ignore[misc]

    def pre(self, module: torch.nn.Module, args: Any) -> None:
        ctx = torch.autocast(self.device_type, dtype=self.dtype)
        ctx.__enter__()
        self._stack.append(ctx)

    def post(self, module: torch.nn.Module, args: Any, output: Any) -> Any:
        if self._stack:
            self._stack.pop().__exit__(None, None, None)
        return to_fp32(output)


def attach_autocast(module: torch.nn.Module, mixed_precision: str, device: torch.device) -> None:
    """Make ``module``'s forward run under autocast and return fp32 outputs (idempotent)."""
    if mixed_precision == "no" or find_autocast(module) is not None:
        return
    hooks = AutocastHooks(device.type, DTYPES[mixed_precision])
    hooks.handles = [
        module.register_forward_pre_hook(hooks.pre),
        module.register_forward_hook(hooks.post, always_call=True),
    ]


def find_autocast(module: torch.nn.Module) -> AutocastHooks | None:
    """The :class:`AutocastHooks` attached to ``module``, if any."""
    for hook in module._forward_pre_hooks.values():
        owner = getattr(hook, "__self__", None)
        if isinstance(owner, AutocastHooks):
            return owner
    return None


def detach_autocast(module: torch.nn.Module) -> None:
    """Remove the autocast hooks :func:`attach_autocast` added (the module then runs in fp32)."""
    hooks = find_autocast(module)
    if hooks is None:
        return
    for hook_dict in (module._forward_pre_hooks, module._forward_hooks):
        for key in [k for k, h in hook_dict.items() if getattr(h, "__self__", None) is hooks]:
            del hook_dict[key]
            module._forward_hooks_always_called.pop(key, None)
