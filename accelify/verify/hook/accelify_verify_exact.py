"""Exact mode of ``accelify verify`` (``ACCELIFY_VERIFY_EXACT=1``): N processes compute what one process computed.

The converted script, launched on N processes, is made to train on the same global batches as the original on one
process (Hugging Face Accelerate's ``split_batches=True`` semantics), so that its learning rates, step counts and
parameters can be compared with the original's step by step. What this module changes in the script's processes:

- seeds: process ``r`` starts from ``seed + 7919 * r`` (process 0 from the original's seed): a value the script draws
  without seeding differs between processes, as in a real launch; at the first ``Accelerator.prepare`` call every
  process takes process 0's torch, numpy and ``random`` states (over the launcher's store), so draws made after it
  start equal;
- data: a loader prepared on N processes iterates the same full batches as on one process (it is prepared as for one
  process) and process ``r`` takes rows ``[r*b/N, (r+1)*b/N)`` of every tensor of each collated batch whose first
  dimension is the batch's. A batch of ``b`` rows that does not split evenly is padded by wrapping around to its
  first rows (the runtime's ``even_batches``); the steps that used such a batch are marked inexact (the mean over
  padded shares is not the original's mean; a pass over a loader that feeds no backward, an evaluation, marks
  nothing), and ``gather_for_metrics`` drops the wrapped-around rows again, as a real launch drops its duplicates
  (``accelify_verify_gathered.py``). The global torch RNG is taken from process 0 when each epoch of a prepared
  loader starts (the runtime shares the permutation seed drawn from it);
- schedulers: a prepared scheduler moves one step per call (``split_batches``: the optimizer takes as many steps as
  the original's); each call of a prepared scheduler is recorded with the optimizer steps and epochs so far, so a
  scheduler stepped once per epoch (which moves N steps per call in a real launch) is still found;
- random draws shaped like the batch, dropout and BatchNorm on a share (``accelify_verify_draws.py``): drawn and
  normalised over the whole batch as the original did, each process keeping its share; where that cannot be done
  the step is marked inexact;
- losses summed over the batch (``reduction="sum"``, ``(x - y).pow(2).sum()``): told from a mean by their values
  against the original's and by the reduction of the loss functions that made them, and their gradient scaled by N
  (``accelify_verify_sums.py``);
- ``accelerator.print`` on the processes that print nothing: recorded as silent lines
  (``accelify_verify_stdout.record_unprinted``).

A step marked inexact ends the step-by-step parameter comparison (``accelify/verify/exactness.py``): what follows it
legitimately differs. Learning rates and step counts are still compared to the end. Only the N-process run is in
exact mode; the one-process runs are the script's own.

Like the recorder, this module imports nothing of accelify at import time; it patches ``accelify.runtime`` when the
script imports it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import random
import sys
import threading
from types import ModuleType
from typing import Any

ENV_EXACT = "ACCELIFY_VERIFY_EXACT"
RANK_SEED_STRIDE = 7919
STORE_WAIT = 60.0  # seconds a process waits for process 0's RNG states
_PREFIX = "accelify_verify/exact"


def enabled() -> bool:
    """Exact mode is asked for in this process's environment."""
    return os.environ.get(ENV_EXACT, "") not in ("", "0")


def rank_seed(seed: int, rank: int) -> int:
    """The seed process ``rank`` starts from (process 0 keeps the original's)."""
    return seed + RANK_SEED_STRIDE * rank


class ExactMode:
    """Exact mode's state in one process; the recorder holds the one instance and reads its marks at each step."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.synced = False
        self.share: tuple[int, int, int] | None = None  # (rows of the current batch, first row, end row) here
        self.last_share: tuple[int, int, int] | None = None  # kept when an exception ends the loop (the error's)
        self.inexact: set[str] = set()  # why the next step is not comparable ("padded batch", "BatchNorm")
        self.loaders = 0
        self.local = threading.local()
        from accelify_verify_epochsums import EpochSums
        from accelify_verify_sums import LossScale

        self.loss_scale = LossScale(self)  # (backward n, its loss) -> the factor for its gradient
        self.epoch_sums = EpochSums()  # this process's sums of per-batch means, per loader epoch

    # -- process group -----------------------------------------------------------------------------------------
    def _world(self) -> tuple[int, int, Any]:
        """(rank, world size, store) of the default group; (0, 1, None) without one."""
        dist = self.recorder.torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return 0, 1, None
        return dist.get_rank(), dist.get_world_size(), dist.distributed_c10d._get_default_store()

    def world_size(self) -> int:
        """Processes in the default group (1 without one)."""
        return self._world()[1]

    def _from_rank0(self, key: str, value: Any) -> Any:
        """Process 0's ``value`` under ``key`` in the store (this process's own when it cannot be read)."""
        rank, world, store = self._world()
        if store is None:
            return value
        from datetime import timedelta

        key = f"{_PREFIX}/{key}"
        try:
            if rank == 0:
                store.set(key, pickle.dumps(value))
                return value
            store.wait([key], timedelta(seconds=STORE_WAIT))
            return pickle.loads(store.get(key))
        except Exception as error:  # process 0 never got there: keep our own states, say so in the record
            self.recorder.write({"event": "hook_note", "note": f"exact mode: no RNG states from process 0: {error}"})
            return value

    def sync_rngs(self, key: str, which: tuple[str, ...] = ("torch", "numpy", "random")) -> None:
        """Take process 0's RNG states named in ``which``."""
        torch = self.recorder.torch
        states: dict[str, Any] = {}
        if "torch" in which:
            states["torch"] = torch.get_rng_state()
        if "random" in which:
            states["random"] = random.getstate()
        numpy = sys.modules.get("numpy")
        if "numpy" in which and numpy is not None:
            states["numpy"] = numpy.random.get_state()
        states = self._from_rank0(key, states)
        if "torch" in states:
            torch.set_rng_state(states["torch"])
        if "random" in states:
            random.setstate(states["random"])
        if "numpy" in states and numpy is not None:
            numpy.random.set_state(states["numpy"])

    def gather_group(self) -> Any:
        """The Gloo group BatchNorm gathers rows over (made at the first prepare, apart from the group DDP's
        all-reduces use, so the two never interleave); None without a process group."""
        return getattr(self, "_group", None)

    def make_group(self) -> None:
        """Make :meth:`gather_group`'s group; every process calls it at its first prepare."""
        dist = self.recorder.torch.distributed
        if self._world()[1] > 1:
            try:
                self._group = dist.new_group(backend="gloo")
            except Exception as error:
                self.recorder.write({"event": "hook_note", "note": f"exact mode: no Gloo group: {error}"})

    # -- marks the recorder reads ------------------------------------------------------------------------------
    def take_inexact(self) -> list[str]:
        """Why the step just taken is not comparable with the original's (and forget it)."""
        reasons, self.inexact = sorted(self.inexact), set()
        return reasons

    # -- batches -----------------------------------------------------------------------------------------------
    def split(self, batch: Any, rank: int, world: int) -> Any:
        """This process's rows of ``batch`` (see the module docstring); sets :attr:`share`."""
        torch = self.recorder.torch
        from accelify_verify_patches import leading_size

        rows = leading_size(batch, torch.Tensor)
        if rows is None or rows == 0:
            self.share = None
            return batch
        part = -(-rows // world)
        lo, hi = part * rank, part * (rank + 1)
        if rows % world:
            self.inexact.add(f"a batch of {rows} rows does not split evenly over {world} processes")
        self.share = self.last_share = (rows, lo, hi)
        self.loss_scale.losses.clear()  # the loss handed to the next backward is computed from this batch
        return _slice(batch, rows, lo, hi, torch)


def _slice(batch: Any, rows: int, lo: int, hi: int, torch: ModuleType, depth: int = 0) -> Any:
    """Rows ``[lo, hi)`` of every tensor in ``batch`` whose first dimension is ``rows`` (wrapping past the end)."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] != rows:
            return batch
        if hi <= rows:
            return batch[lo:hi]
        index = torch.arange(lo, hi, device=batch.device) % rows
        return batch.index_select(0, index)
    if depth > 6:
        return batch
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*[_slice(v, rows, lo, hi, torch, depth + 1) for v in batch])
    if isinstance(batch, (list, tuple)):
        return type(batch)(_slice(v, rows, lo, hi, torch, depth + 1) for v in batch)
    if isinstance(batch, dict):
        try:
            return type(batch)({k: _slice(v, rows, lo, hi, torch, depth + 1) for k, v in batch.items()})
        except TypeError:
            return {k: _slice(v, rows, lo, hi, torch, depth + 1) for k, v in batch.items()}
    return batch


def batch_fingerprint(batch: Any, torch: ModuleType, depth: int = 0) -> float:
    """The sum of every number in ``batch`` (float64): two processes drew the same batch when it is equal."""
    if isinstance(batch, torch.Tensor):
        if batch.is_floating_point() or batch.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool):
            return float(batch.detach().double().sum().item()) if batch.numel() else 0.0
        return 0.0
    if depth > 6:
        return 0.0
    if isinstance(batch, dict):
        return sum(batch_fingerprint(v, torch, depth + 1) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(batch_fingerprint(v, torch, depth + 1) for v in batch)
    return 0.0


def patch_runtime(prepare: ModuleType, exact: ExactMode) -> None:
    """``accelify.runtime.prepare``: RNGs synced at the first prepare, loaders split, schedulers one step a call."""
    prepare_all, prepare_loader, prepare_scheduler = prepare.prepare_all, prepare.prepare_data_loader, \
        prepare.prepare_scheduler

    @functools.wraps(prepare_all)
    def synced_prepare_all(*args: Any, **kwargs: Any) -> Any:
        if not exact.synced:
            exact.synced = True
            exact.sync_rngs("prepare")
            exact.make_group()
        return prepare_all(*args, **kwargs)

    @functools.wraps(prepare_loader)
    def split_loader(prepared: Any, settings: Any, data_loader: Any, *args: Any, **kwargs: Any) -> Any:
        world = settings.num_processes
        if world < 2:
            return prepare_loader(prepared, settings, data_loader, *args, **kwargs)
        whole = dataclasses.replace(settings, num_processes=1, process_index=0)
        loader = prepare_loader(prepared, whole, data_loader, *args, **kwargs)
        if not getattr(loader, "_accelify_verify_split", 0):
            ordinal = exact.loaders
            exact.loaders += 1
            loader.__class__ = _split_class(type(loader), exact)
            loader._accelify_verify_split = world
            loader._accelify_verify_ordinal = ordinal
            loader._accelify_verify_epochs = 0
            loader._accelify_verify_whole = not settings.split_batches  # a real launch gives whole batches
        return loader

    @functools.wraps(prepare_scheduler)
    def one_step_scheduler(prepared: Any, settings: Any, scheduler: Any) -> Any:
        wrapped = prepare_scheduler(prepared, dataclasses.replace(settings, split_batches=True), scheduler)
        _record_calls(wrapped, exact)
        return wrapped

    prepare.prepare_all = synced_prepare_all
    prepare.prepare_data_loader = split_loader
    prepare.prepare_scheduler = one_step_scheduler
    import importlib

    from accelify_verify_epochsums import patch_reduce
    from accelify_verify_gathered import patch_gather_for_metrics

    ops = importlib.import_module(prepare.__name__.rpartition(".")[0] + ".ops")
    patch_reduce(ops, exact)
    patch_gather_for_metrics(ops, exact)
    state = sys.modules.get("accelify.runtime.state")
    if state is not None and hasattr(state, "PartialState"):
        from accelify_verify_stdout import record_unprinted

        record_unprinted(state.PartialState, exact.recorder)


_SPLIT_CLASSES: dict[type, type] = {}


def _split_class(base: type, exact: ExactMode) -> type:
    """A subclass of the prepared loader's class whose iteration yields this process's rows of each batch."""
    if base in _SPLIT_CLASSES:
        return _SPLIT_CLASSES[base]

    def __iter__(self: Any) -> Any:
        rank, world, _ = exact._world()
        epoch = self._accelify_verify_epochs
        self._accelify_verify_epochs += 1
        exact.sync_rngs(f"loader{self._accelify_verify_ordinal}/epoch{epoch}", ("torch",))
        torch = exact.recorder.torch
        ordinal = self._accelify_verify_ordinal
        if getattr(self, "_accelify_verify_whole", True):
            exact.epoch_sums.epoch(ordinal)
        backwards, marks = exact.recorder.backwards, set(exact.inexact)
        try:
            for index, batch in enumerate(base.__iter__(self)):
                exact.epoch_sums.batch(ordinal)
                if index < 64:
                    exact.recorder.write({"event": "batch", "loader": self._accelify_verify_ordinal, "epoch": epoch,
                                          "index": index, "sum": batch_fingerprint(batch, torch)})
                share = exact.split(batch, rank, world) if world > 1 else batch
                exact.recorder.in_epoch = True  # the prepared loader reads one batch ahead: its epoch ends here,
                yield share
            exact.recorder.in_epoch = False  # after the script's last batch, as in the original's loader
        finally:
            exact.share = None
            if exact.recorder.backwards == backwards:  # an evaluation pass: what it marked feeds no step
                exact.inexact = marks

    cls = type(base.__name__, (base,), {"__iter__": __iter__, "__module__": base.__module__})
    _SPLIT_CLASSES[base] = cls
    return cls


def _record_calls(scheduler: Any, exact: ExactMode) -> None:
    """Record each call of a prepared scheduler: its name, the optimizer steps and epochs ended before it."""
    if getattr(scheduler, "_accelify_verify_recorded", False):
        return
    step = scheduler.step

    def recorded_step(*args: Any, **kwargs: Any) -> Any:
        recorder = exact.recorder
        recorder.write({"event": "scheduler", "name": recorder.name_of(scheduler), "prepared": True,
                        "steps": recorder.steps, "epochs": recorder.training_epochs()})
        return step(*args, **kwargs)

    scheduler.__dict__["step"] = recorded_step  # this instance only (AcceleratedScheduler has no __slots__)
    scheduler.__dict__["_accelify_verify_recorded"] = True
