"""The Accelerator's methods for a prepared model's weights: unwrapping, its state dict, writing it to files.

A base class of :class:`~.accelerator.Accelerator` (its methods, grouped by job) that delegates to
:mod:`.model_io` (and :mod:`.fsdp` for sharded models). It reads only the Accelerator's public
attributes ``use_fsdp`` and ``is_main_process``.
"""

from __future__ import annotations

from typing import Any

import torch

from . import model_io


class AcceleratorModels:
    """``Accelerator.unwrap_model``, ``get_state_dict``, ``save`` and ``save_model``."""

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> torch.nn.Module:
        """The user's own module inside DDP (and ``torch.compile`` unless ``keep_torch_compile``).

        ``keep_fp32_wrapper=False`` also removes mixed-precision autocast from it for good.
        """
        return model_io.unwrap(model, keep_fp32_wrapper, keep_torch_compile)

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        """The full state dict of ``model`` (with FSDP: gathered on the main process, every process must call)."""
        if self.use_fsdp:
            from . import fsdp

            if fsdp.is_fsdp_module(model):
                return fsdp.full_state_dict(model)
        return (self.unwrap_model(model) if unwrap else model).state_dict()

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """``torch.save`` on the main process only, atomically (a reader never sees half a file)."""
        if self.is_main_process:
            model_io.save_atomic(obj, f, safe_serialization)

    def save_model(
        self, model: torch.nn.Module, save_directory: str, max_shard_size: int | str = "10GB", safe_serialization: bool = True
    ) -> None:
        """Write ``model``'s weights to ``save_directory`` (``model.safetensors`` or ``pytorch_model.bin``, sharded if big).

        Every process must call it (FSDP gathers); only the main process writes.
        """
        state_dict = self.get_state_dict(model)
        if self.is_main_process:
            model_io.save_model_files(state_dict, save_directory, max_shard_size, safe_serialization)
