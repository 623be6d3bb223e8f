"""Exact mode of ``accelify verify``: a value reduced over the processes that is a sum of per-batch mean losses.

Exact mode gives every process a share of every batch (``split_batches``); a real launch gives each process 1/N of
the whole batches. A value that adds up one number per batch therefore counts N times as many batches per process
in exact mode: ``total += loss.item()`` over a prepared loader, the loss a mean over the batch's rows, holds on each
process the sum over all B batches of its share's mean; in a real launch the sum over its B/N batches. Reduced with
``"sum"`` (right in a real launch: the B batch means of the original) exact mode prints N times the original; reduced
with ``"mean"`` (1/N in a real launch) exact mode prints the original's value. A value summed over rows (a loss
summed over the batch, a count of samples) is the same in both: each process holds 1/N of the rows either way.

So exact mode keeps, per prepared loader and epoch, two sums of this process's per-batch means: the losses handed
to ``backward`` that exact mode found to be means over the rows (``accelify_verify_sums``), and the first
mean-reduced loss function's value on each batch (an evaluation loop calls no backward). When the script reduces a
tensor (``accelify.runtime.ops.reduce``) one of whose elements (up to ``ELEMENTS``) equals one of those sums of at
least two batches, the reduce is recorded (``reduce`` event: the operation, every element's result, which elements
are such sums, the steps so far): what a real launch reduces there is 1/N of exact mode's, whatever the reduction,
and ``printed.py`` judges the printed result that way. A loader prepared with ``split_batches=True`` splits batches
in a real launch too, and is left out. A value derived from the sum before it is reduced (divided by
``len(loader)``: a per-process average, N times the original in both runs when summed) matches no sum, and is
judged as it is.

Like the recorder, this module imports nothing of accelify at import time.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

ELEMENTS = 16  # elements of a reduced tensor compared with the sums
MATCH = 1e-5  # relative closeness of a reduced element to a sum of per-batch means (a sum kept in a float32
# tensor, `total += loss.detach()`, drifts from our float64 sum by float32 rounding)
MIN_BATCHES = 2  # a sum of one batch's mean is that mean: not told apart


class EpochSums:
    """The sums of this process's per-batch means in the current (or last) epoch of each split loader."""

    def __init__(self) -> None:
        self.sums: dict[int, dict[str, float]] = {}  # loader ordinal -> {"backward", "loss", "batches"}
        self.current: int | None = None  # the ordinal of the loader whose batch this process holds
        self._loss_taken = False  # the current batch's first mean loss was added

    def epoch(self, ordinal: int) -> None:
        """A new epoch of loader ``ordinal`` starts: its sums start again."""
        self.sums[ordinal] = {"backward": 0.0, "loss": 0.0, "batches": 0}

    def batch(self, ordinal: int) -> None:
        """This process took its share of a new batch of loader ``ordinal``."""
        self.current = ordinal
        self._loss_taken = False
        if ordinal in self.sums:
            self.sums[ordinal]["batches"] += 1

    def mean_backward(self, value: float) -> None:
        """A loss exact mode found to be a mean over the batch's rows was handed to backward."""
        if self.current in self.sums:
            self.sums[self.current]["backward"] += value

    def mean_loss(self, value: float) -> None:
        """A mean-reduced loss function returned ``value`` on this batch's share (the first one counts)."""
        if self.current in self.sums and not self._loss_taken:
            self._loss_taken = True
            self.sums[self.current]["loss"] += value

    def is_batch_sum(self, value: float) -> bool:
        """``value`` is one of the sums of per-batch means, over at least ``MIN_BATCHES`` batches."""
        for sums in self.sums.values():
            if sums["batches"] < MIN_BATCHES:
                continue
            for total in (sums["backward"], sums["loss"]):
                if total and abs(value - total) <= MATCH * max(abs(value), abs(total)):
                    return True
        return False


def patch_reduce(ops: ModuleType, exact: Any) -> None:
    """``accelify.runtime.ops.reduce`` records a reduce of a sum of per-batch means (see the module docstring)."""
    reduce = ops.reduce
    if getattr(reduce, "_accelify_verify_epochsums", False):
        return

    @functools.wraps(reduce)
    def recorded_reduce(tensor: Any, reduction: str = "sum", *args: Any, **kwargs: Any) -> Any:
        local = _elements(tensor, exact.recorder.torch)
        result = reduce(tensor, reduction, *args, **kwargs)
        if local and exact.share is None:  # after a loop, not inside one
            flags = [exact.epoch_sums.is_batch_sum(v) for v in local]
            if any(flags):
                values = _elements(result, exact.recorder.torch)
                recorder = exact.recorder
                recorder.write({"event": "reduce", "op": str(reduction), "values": values, "batch_sums": flags,
                                "steps": recorder.steps, "backwards": recorder.backwards})
        return result

    recorded_reduce._accelify_verify_epochsums = True  # type: ignore[attr-defined]
    ops.reduce = recorded_reduce


def _elements(tensor: Any, torch: ModuleType) -> list[float]:
    """The values of a small tensor (or a Python number), as floats; empty for anything else."""
    if isinstance(tensor, (int, float)) and not isinstance(tensor, bool):
        return [float(tensor)]
    if not isinstance(tensor, torch.Tensor) or tensor.numel() > ELEMENTS or tensor.is_complex():
        return []
    return [float(v) for v in tensor.detach().double().reshape(-1).tolist()]
