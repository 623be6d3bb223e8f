"""Checkpoints: ``save_state``/``load_state`` and the files and folders behind them.

One job per module:

- :mod:`.project`: ``ProjectConfiguration``, what ``Accelerator.save_state``/``load_state``/
  ``register_for_checkpointing`` delegate to (over the Accelerator's ``PreparedObjects``), the plain
  :func:`save_checkpoint`, automatic naming and pruning.
- :mod:`.load`: reading a checkpoint back, all or nothing (:func:`load_checkpoint`).
- :mod:`.layout`: the files inside a checkpoint folder (Hugging Face Accelerate's names) and how each kind
  of state is written and read (``weights_only`` loading, safetensors, RNG states).
- :mod:`.atomic`: folders every process writes into, renamed into place only when all succeeded, and their
  fsyncs on a background thread.

The names below are the package's public ones (``from accelify.runtime.checkpoint import ...``).
"""

from __future__ import annotations

from ..errors import CheckpointError, CheckpointPeerError, ConfigurationError
from ..launch_settings import DURABLE_ENV, durable_checkpoints
from .layout import DATALOADER_NAME, OPTIMIZER_NAME, SCALER_NAME, SCHEDULER_NAME, indexed, rng_states, set_rng_states
from .load import (
    check_model_state,
    check_optimizer_state,
    earlier_checkpoints,
    list_checkpoints,
    load_checkpoint,
    readable_checkpoint,
)
from .project import (
    ProjectConfiguration,
    check_checkpointable,
    load_state,
    prune_checkpoints,
    register_for_checkpointing,
    save_checkpoint,
    save_state,
)

__all__ = [
    "CheckpointError", "CheckpointPeerError", "ConfigurationError", "DURABLE_ENV", "durable_checkpoints",
    "DATALOADER_NAME", "OPTIMIZER_NAME", "SCALER_NAME", "SCHEDULER_NAME", "indexed", "rng_states", "set_rng_states",
    "check_model_state", "check_optimizer_state", "earlier_checkpoints", "list_checkpoints", "load_checkpoint",
    "readable_checkpoint", "ProjectConfiguration", "check_checkpointable", "load_state", "prune_checkpoints",
    "register_for_checkpointing", "save_checkpoint", "save_state",
]
