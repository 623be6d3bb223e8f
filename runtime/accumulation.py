"""Gradient accumulation contexts: ``accumulate()`` (one micro-batch) and ``no_sync()`` (skip the all-reduce).

Small classes rather than generator-based context managers: ``accumulate`` runs once per training
step, so it stays a few attribute accesses on the boundary steps that need no ``no_sync``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel

from .data_loader_shard import active_data_loader
from .gradient_state import GradientState


def no_sync(model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
    """Skip the gradient all-reduce in this block's backward passes (gradients accumulate locally)."""
    if isinstance(model, DistributedDataParallel):
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        return _FsdpNoSync(model)
    return contextlib.nullcontext()


class _FsdpNoSync:
    """FSDP2's equivalent of DDP ``no_sync``: turn gradient reduction off for the block."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __enter__(self) -> None:
        self.model.set_requires_gradient_sync(False)

    def __exit__(self, *exc: Any) -> None:
        self.model.set_requires_gradient_sync(True)


class Accumulate:
    """One micro-batch: on entering, count the step in ``state``; off the boundary, enter ``no_sync``
    for every model (the last batch of the active prepared loader is always a boundary)."""

    __slots__ = ("state", "models", "_stack")

    def __init__(self, state: GradientState, models: Sequence[torch.nn.Module]) -> None:
        self.state = state
        self.models = models
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> None:
        loader = active_data_loader()
        if self.state.advance(loader is not None and loader.end_of_dataloader) or not self.models:
            return
        stack = contextlib.ExitStack()
        for model in self.models:
            stack.enter_context(no_sync(model))
        self._stack = stack

    def __exit__(self, *exc: Any) -> bool | None:
        stack, self._stack = self._stack, None
        return stack.__exit__(*exc) if stack is not None else None
