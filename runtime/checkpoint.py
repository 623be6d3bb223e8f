"""save_state / load_state: atomic checkpoint folders, RNG states, safe (weights_only) loading.

Scaffolding: the runtime-features work fills this module (see docs/INTERNALS.md).
"""

from __future__ import annotations


class CheckpointMixin:
    """Checkpoint methods of ``Accelerator``: save_state, load_state, register_for_checkpointing."""
