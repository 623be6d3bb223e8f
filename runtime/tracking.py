"""Experiment trackers (JSONL, TensorBoard): init_trackers, log, end_training on the main process.

Scaffolding: the runtime-features work fills this module (see docs/INTERNALS.md).
"""

from __future__ import annotations


class TrackingMixin:
    """Tracker methods of ``Accelerator``: init_trackers, log, get_tracker, end_training."""
