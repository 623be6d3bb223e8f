"""The record of what one ``Accelerator`` prepared and registered, passed to the code that needs it.

``Accelerator`` owns one :class:`PreparedObjects` and hands it to :mod:`.prepare` (which appends to
it), :mod:`.checkpoint` (which saves and restores what it holds, in order) and ``free_memory``
(which empties it). Nothing reads these lists off the ``Accelerator`` itself; its ``_models``,
``_optimizers``, ``_schedulers``, ``_dataloaders`` and ``_custom_objects`` (Hugging Face
Accelerate's names, which some scripts read) are views of this record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class PreparedObjects:
    """Prepared models, optimizers, schedulers and data loaders, and objects registered for checkpointing.

    Each list keeps the order of preparation: the n-th model of a checkpoint is ``models[n]``.
    With two processes each process has its own record, holding its own wrappers of the same objects.
    """

    models: list[Any] = field(default_factory=list)  # as prepare returned them (DDP/FSDP-wrapped or plain)
    optimizers: list[Any] = field(default_factory=list)  # AcceleratedOptimizer
    schedulers: list[Any] = field(default_factory=list)  # AcceleratedScheduler
    dataloaders: list[Any] = field(default_factory=list)  # DataLoaderShard
    custom_objects: list[Any] = field(default_factory=list)  # register_for_checkpointing

    def forget_prepared(self) -> None:
        """Drop the prepared objects (``free_memory``); registered objects stay registered.

        The lists are replaced, not emptied: a caller that kept the old list keeps its contents.
        """
        self.models, self.optimizers, self.schedulers, self.dataloaders = [], [], [], []

    def model_of(self, optimizer: Any) -> Any:
        """The prepared model that holds ``optimizer``'s parameters (a torch optimizer), or None."""
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return next((m for m in self.models if any(id(p) in params for p in m.parameters())), None)
