"""Freeing device memory, and retrying a function with a smaller batch on out-of-memory."""

from __future__ import annotations

import gc
from typing import Any

import torch


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Return cached blocks of the current accelerator's allocator to the driver (no-op on CPU)."""
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop the caller's references and free memory: ``a, b = release_memory(a, b)``."""
    cleared: list[None] = [None] * len(objects)
    del objects
    clear_device_cache(garbage_collection=True)
    return cleared
