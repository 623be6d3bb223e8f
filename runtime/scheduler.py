"""AcceleratedScheduler: steps a learning-rate scheduler only when its optimizer really stepped.

Semantics (Hugging Face Accelerate's ``step_scheduler_with_optimizer=True``, matched on purpose):

* On accumulation steps (``sync_gradients`` false) the schedule does not move; only the
  scheduler's ``_step_count`` advances, as Accelerate's ``adjust_scheduler`` does.
* When an fp16 step was skipped for overflow, the schedule does not move.
* Otherwise, unless batches are split, each call steps the wrapped scheduler ``num_processes``
  times: every process sees its own batch, so one training step consumes ``num_processes``
  batches of data and a schedule written in batches for one process ends on time on N.
  With two processes, ``scheduler.step()`` moves a ``StepLR(step_size=4)`` two batches along.
* ``ReduceLROnPlateau`` is driven by the metric it is given, not by batches: each
  ``scheduler.step(metric)`` is one evaluation and steps it exactly once, whatever the step before
  it was (Hugging Face Accelerate steps it ``num_processes`` times, so its patience runs out N
  times too early, and ignores a call made after an accumulation step).
"""

from __future__ import annotations

from typing import Any, Sequence

from torch.optim.lr_scheduler import ReduceLROnPlateau

from .optimizer import AcceleratedOptimizer
from .gradient_state import GradientState


class AcceleratedScheduler:
    """Wraps an LR scheduler so that it follows the optimizer (see the module docstring)."""

    def __init__(
        self,
        scheduler: Any,
        optimizers: AcceleratedOptimizer | Sequence[AcceleratedOptimizer],
        *,
        gradient_state: GradientState | None = None,
        num_processes: int = 1,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = list(optimizers) if isinstance(optimizers, (list, tuple)) else [optimizers]
        self.gradient_state = gradient_state if gradient_state is not None else GradientState()
        self.num_processes = num_processes
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches
        self._calls = 0  # step() calls; the sentinels (see .sentinels) look at call ``_sentinel_at`` (0: never)
        self._sentinel: Any = None
        self._sentinel_at = 0

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance the schedule if the optimizer stepped (``num_processes`` times unless batches are split)."""
        calls = self._calls = self._calls + 1
        if calls == self._sentinel_at:
            self._sentinel_at = self._sentinel(self, calls)
        if not self.step_with_optimizer or isinstance(self.scheduler, ReduceLROnPlateau):
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler and hasattr(self.scheduler, "_step_count"):
                self.scheduler._step_count += 1
            return
        for opt in self.optimizers:
            if getattr(opt, "step_was_skipped", False):
                return
        times = 1 if self.split_batches else self.num_processes
        total = getattr(self.scheduler, "total_steps", None)  # OneCycleLR raises past its total
        for _ in range(times):
            if total is not None and self.scheduler._step_count > total:
                break
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def get_lr(self) -> Any:
        return self.scheduler.get_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        return self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # anything else (last_epoch, base_lrs, optimizer...) is the wrapped scheduler's
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    # The sentinel belongs to the Accelerator of this process: a copy is not watched.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sentinel": None, "_sentinel_at": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_calls": 0, "_sentinel": None, "_sentinel_at": 0, **state})

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
