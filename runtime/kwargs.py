"""Kwargs handlers: dataclasses that pass extra options to DDP, the GradScaler, autocast and the process group.

Passed as ``Accelerator(kwargs_handlers=[...])``, with Hugging Face Accelerate's names and defaults::

    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Iterable

from .errors import ConfigurationError


class KwargsHandler:
    """Base class: ``to_kwargs()`` returns the fields whose values differ from the defaults."""

    def to_kwargs(self) -> dict[str, Any]:
        default = type(self)()
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)}  # type: ignore[arg-type]


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Options for ``torch.nn.parallel.DistributedDataParallel`` (same names and defaults as DDP)."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Options for the ``torch.amp.GradScaler`` used with ``mixed_precision="fp16"``."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Options for ``torch.distributed.init_process_group``.

    ``backend=None`` picks NCCL (with Gloo for CPU tensors) when CUDA is usable, Gloo otherwise;
    ``timeout`` bounds how long processes wait for each other (joining and each collective).
    """

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.init_method not in (None, "env://"):
            raise ConfigurationError(
                f"InitProcessGroupKwargs(init_method={self.init_method!r}) is not supported: the process group is "
                "always found through the environment torchrun sets (env://); drop init_method."
            )
        if isinstance(self.timeout, (int, float)):
            self.timeout = timedelta(seconds=self.timeout)


@dataclass
class AutocastKwargs(KwargsHandler):
    """Options for ``torch.autocast`` under mixed precision (``accelerator.autocast(autocast_handler=...)``)."""

    enabled: bool = True
    cache_enabled: bool | None = None


_HANDLERS = (DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs, AutocastKwargs)


def sort_handlers(handlers: Iterable[Any] | None) -> dict[type, Any]:
    """Map each handler class to the one instance given; reject duplicates and unknown objects."""
    found: dict[type, Any] = {}
    for handler in handlers or ():
        cls = next((c for c in _HANDLERS if isinstance(handler, c)), None)
        if cls is None:
            names = ", ".join(c.__name__ for c in _HANDLERS)
            raise ConfigurationError(
                f"kwargs_handlers got {handler!r}; accelify supports {names} (import them from accelify.runtime)."
            )
        if cls in found:
            raise ConfigurationError(f"kwargs_handlers holds two {cls.__name__} objects; pass one and merge their options.")
        found[cls] = handler
    return found
