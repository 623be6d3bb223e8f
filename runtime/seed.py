"""Seeding every random number generator a training script uses, on every process."""

from __future__ import annotations

import random

import torch


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy (when installed) and torch (CPU and every CUDA device).

    With two processes and ``device_specific=False`` (the default, as in Hugging Face Accelerate),
    both processes get the same seed, so models built after ``set_seed(42)`` start identical;
    ``device_specific=True`` adds the process index (process 1 uses 43), e.g. for data augmentation.
    ``deterministic=True`` also asks torch for deterministic algorithms.
    """
    if device_specific:
        from .state import PartialState

        seed += PartialState().process_index
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # NumPy is optional
        pass
    else:
        np.random.seed(seed % (2**32))
    torch.manual_seed(seed)  # also seeds every CUDA device (lazily when CUDA is not initialised yet)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
