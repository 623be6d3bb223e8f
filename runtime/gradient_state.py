"""Gradient accumulation's state: which step of the accumulation cycle an Accelerator is on.

One :class:`GradientState` per ``Accelerator``, read by its optimizer and scheduler wrappers and by
``accumulate``; what it says about the data loader being iterated is read from that loader.
"""

from __future__ import annotations

from typing import Any


class GradientState:
    """One ``Accelerator``'s gradient-accumulation state, read by its optimizer and scheduler wrappers.

    ``sync_gradients`` is True on the steps where gradients are all-reduced and the optimizer steps:
    every ``num_steps``-th ``accumulate`` step and the last batch of the data loader.
    """

    __slots__ = ("num_steps", "adjust_scheduler", "sync_with_dataloader", "sync_gradients", "step")

    def __init__(self, num_steps: int = 1, adjust_scheduler: bool = True, sync_with_dataloader: bool = True) -> None:
        self.num_steps = num_steps
        self.adjust_scheduler = adjust_scheduler
        self.sync_with_dataloader = sync_with_dataloader
        self.sync_gradients = True
        self.step = 0

    def advance(self, end_of_dataloader: bool) -> bool:
        """Count one ``accumulate`` step and return whether it is a boundary (gradients synchronised)."""
        if self.sync_with_dataloader and end_of_dataloader:
            self.step = 0
            self.sync_gradients = True
        else:
            self.step += 1
            self.sync_gradients = self.step % self.num_steps == 0
        return self.sync_gradients

    # Hugging Face's GradientState also describes the loader being iterated; read it from the loader.
    @property
    def active_dataloader(self) -> Any:
        """The prepared data loader being iterated now (innermost), or None."""
        from .data_loader_shard import active_data_loader

        return active_data_loader()

    @property
    def in_dataloader(self) -> bool:
        """True while a prepared data loader is being iterated."""
        return self.active_dataloader is not None

    @property
    def end_of_dataloader(self) -> bool:
        """True while the active loader hands out its last batch of the epoch."""
        loader = self.active_dataloader
        return bool(loader is not None and loader.end_of_dataloader)

    @property
    def remainder(self) -> int:
        """Samples the active loader duplicated to even out its last batch (-1 when unknown or none active)."""
        loader = self.active_dataloader
        return -1 if loader is None else loader.remainder
