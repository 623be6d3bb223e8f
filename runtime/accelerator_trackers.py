"""The Accelerator's methods for experiment trackers: starting them, logging to them, finding one.

A base class of :class:`~.accelerator.Accelerator` (its methods, grouped by job) that delegates to
:mod:`.tracking`. It reads only the Accelerator's public attributes ``log_with``, ``logging_dir``,
``is_main_process`` and ``trackers`` (which ``init_trackers`` extends). ``end_training``, which
also runs the sentinels, stays on the Accelerator.
"""

from __future__ import annotations

from typing import Any

from . import tracking


class AcceleratorTrackers:
    """``Accelerator.init_trackers``, ``log`` and ``get_tracker``."""

    def init_trackers(self, project_name: str, config: dict[str, Any] | None = None,
                      init_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Start every tracker of ``log_with`` for run ``project_name`` and store ``config`` in each.

        With two processes, rank 0 creates ``<logging_dir>/<project_name>/metrics.jsonl`` (for
        ``log_with="jsonl"``); rank 1 starts nothing.
        """
        self.trackers = self.trackers + tracking.start_trackers(
            self.log_with, project_name, self.logging_dir, is_main_process=self.is_main_process, config=config,
            init_kwargs=init_kwargs)

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
        """Send ``values`` to every tracker (main process only).

        With two processes, ``accelerator.log({"loss": 0.5}, step=3)`` appends one line on rank 0
        and does nothing on rank 1.
        """
        tracking.log_to(self.trackers, values, is_main_process=self.is_main_process, step=step, log_kwargs=log_kwargs)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        """The started tracker called ``name`` (its underlying object with ``unwrap=True``).

        With no trackers started, returns an inert ``GeneralTracker`` so rank-agnostic code keeps working.
        """
        return tracking.find_tracker(self.trackers, name, unwrap)
