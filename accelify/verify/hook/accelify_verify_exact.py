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
  padded shares is not the original's mean). The global torch RNG is taken from process 0 when each epoch of a
  prepared loader starts (the runtime shares the permutation seed drawn from it);
- schedulers: a prepared scheduler moves one step per call (``split_batches``: the optimizer takes as many steps as
  the original's); each call of a prepared scheduler is recorded with the optimizer steps and epochs so far, so a
  scheduler stepped once per epoch (which moves N steps per call in a real launch) is still found;
- random draws shaped like the batch: ``torch.randn/rand/randint``, ``randn_like/rand_like`` and ``F.dropout`` on a
  tensor whose first dimension is this process's share of the current batch draw for the whole batch and keep the
  share (the original drew for the whole batch from the same RNG state); a dropout on another shape (sequence-first
  tensors), ``dropout2d`` and the like are marked inexact: from that step on the draws differ from the original's;
- BatchNorm in training mode on a share: the rows of every process are gathered (autograd-aware, over a Gloo group
  of its own), normalised together as the original did, and this process keeps its own; where that cannot be done
  (a batch that does not split evenly) the step is marked inexact, "BatchNorm statistics over a shard";
- losses summed over the batch (``reduction="sum"``, ``(x - y).pow(2).sum()``): told from a mean by their values
  against the original's, and their gradient scaled by N (``accelify_verify_sums.py``);
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
        self.inexact: set[str] = set()  # why the next step is not comparable ("padded batch", "BatchNorm")
        self.loaders = 0
        self.local = threading.local()
        from accelify_verify_sums import LossScale

        self.loss_scale = LossScale(self)  # (backward n, its loss) -> the factor for its gradient

    # -- process group -----------------------------------------------------------------------------------------
    def _world(self) -> tuple[int, int, Any]:
        """(rank, world size, store) of the default group; (0, 1, None) without one."""
        dist = self.recorder.torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return 0, 1, None
        return dist.get_rank(), dist.get_world_size(), dist.distributed_c10d._get_default_store()

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
        self.share = (rows, lo, hi)
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


# -- patches ------------------------------------------------------------------------------------------------------
def patch_torch(torch: ModuleType, exact: ExactMode) -> None:
    """Dropout off; batch-shaped random draws drawn whole and shared; BatchNorm on a share marked inexact."""
    import torch.nn.functional as F

    dropout = F.dropout

    @functools.wraps(dropout)
    def shared_dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        share = exact.share
        if share is None or not training or not 0 < p < 1 or not isinstance(input, torch.Tensor) or input.dim() == 0:
            return dropout(input, p, training, inplace)
        rows, lo, hi = share
        if input.shape[0] != hi - lo or rows == hi - lo:
            exact.inexact.add("dropout on a tensor whose first dimension is not the batch's")
            return dropout(input, p, training, inplace)
        # what torch's CPU dropout computes, with the mask drawn for the whole batch
        noise = _slice(input.new_empty((rows, *input.shape[1:])).bernoulli_(1 - p), rows, lo, hi, torch)
        noise = noise.div(1 - p)
        return input.mul_(noise) if inplace else input * noise

    F.dropout = shared_dropout

    def marked(name: str) -> Any:
        original = getattr(F, name)

        @functools.wraps(original)
        def feature_dropout(input: Any, *args: Any, **kwargs: Any) -> Any:
            training = kwargs.get("training", args[1] if len(args) > 1 else True)
            if exact.share is not None and training:
                exact.inexact.add(f"{name} draws its mask per process")
            return original(input, *args, **kwargs)

        return feature_dropout

    for name in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        if hasattr(F, name):
            setattr(F, name, marked(name))

    def whole(original: Any, like: bool) -> Any:
        @functools.wraps(original)
        def draw(*args: Any, **kwargs: Any) -> Any:
            share = exact.share
            if share is None or getattr(exact.local, "inside", False):
                return original(*args, **kwargs)
            rows, lo, hi = share
            exact.local.inside = True
            try:
                if like:
                    tensor = args[0] if args else kwargs.get("input")
                    if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0 or tensor.shape[0] != hi - lo:
                        return original(*args, **kwargs)
                    full = tensor.new_empty((rows, *tensor.shape[1:]))
                    drawn = original(full, *args[1:], **{k: v for k, v in kwargs.items() if k != "input"})
                else:
                    size, rest, key = _size_of(original, args, kwargs)
                    if size is None or not size or size[0] != hi - lo:
                        return original(*args, **kwargs)
                    drawn = original(*rest, **{**kwargs, key: (rows, *size[1:])}) if key else \
                        original(*rest, (rows, *size[1:]), **kwargs)
                return _slice(drawn, rows, lo, hi, torch)
            finally:
                exact.local.inside = False

        return draw

    for name, like in (("randn", False), ("rand", False), ("randint", False), ("randn_like", True),
                       ("rand_like", True)):
        setattr(torch, name, whole(getattr(torch, name), like))

    batch_norm = F.batch_norm

    @functools.wraps(batch_norm)
    def whole_batch_norm(input: Any, *args: Any, **kwargs: Any) -> Any:
        training = kwargs.get("training", args[4] if len(args) > 4 else False)
        share = exact.share
        if not training or share is None or not isinstance(input, torch.Tensor) or input.dim() == 0:
            return batch_norm(input, *args, **kwargs)
        rows, lo, hi = share
        if input.shape[0] != hi - lo or rows == hi - lo:
            return batch_norm(input, *args, **kwargs)
        group = exact.gather_group()
        if group is None or rows % (hi - lo):
            exact.inexact.add("BatchNorm statistics over a shard")
            return batch_norm(input, *args, **kwargs)
        # the statistics of the whole batch, as the original computed them: gather every process's rows (the
        # gather's backward sums each process's gradient for them), normalise all, keep this process's rows
        import warnings

        from torch.distributed.nn.functional import all_gather

        with warnings.catch_warnings():  # deprecated for functional collectives, whose backward Gloo lacks
            warnings.simplefilter("ignore", FutureWarning)
            parts = all_gather(input.contiguous(), group=group)
        whole = torch.cat(parts, dim=0)
        return batch_norm(whole, *args, **kwargs)[lo:hi]

    F.batch_norm = whole_batch_norm

    def weighted(name: str) -> Any:
        original = getattr(F, name)

        @functools.wraps(original)
        def mean_over_share(input: Any, target: Any, weight: Any = None, *args: Any, **kwargs: Any) -> Any:
            if exact.share is not None and kwargs.get("reduction", "mean") == "mean":
                ignore = kwargs.get("ignore_index", -100)
                if weight is not None:
                    exact.inexact.add(f"{name} with class weights: the mean over each share, averaged over the "
                                      "processes, is not the batch's weighted mean")
                elif isinstance(target, torch.Tensor) and not target.is_floating_point() and \
                        bool((target == ignore).any()):
                    exact.inexact.add(f"{name} ignores some targets: the mean over each share, averaged over the "
                                      "processes, is not the batch's mean")
            return original(input, target, weight, *args, **kwargs)

        return mean_over_share

    for name in ("cross_entropy", "nll_loss"):
        setattr(F, name, weighted(name))


def _size_of(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...], str]:
    """The shape a ``torch.randn``-like call asks for, the arguments before it, and its keyword (or "")."""
    if function.__name__ == "randint":  # randint(high, size) or randint(low, high, size)
        if "size" in kwargs:
            return tuple(kwargs["size"]), args, "size"
        sizes = [i for i, a in enumerate(args) if isinstance(a, (tuple, list))]
        if not sizes:
            return None, args, ""
        i = sizes[0]
        return tuple(args[i]), args[:i], ""
    if "size" in kwargs:
        return tuple(kwargs["size"]), args, "size"
    if args and isinstance(args[0], (tuple, list)):
        return tuple(args[0]), (), ""
    if args and all(isinstance(a, int) for a in args):
        return tuple(args), (), ""
    return None, args, ""


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
        return loader

    @functools.wraps(prepare_scheduler)
    def one_step_scheduler(prepared: Any, settings: Any, scheduler: Any) -> Any:
        wrapped = prepare_scheduler(prepared, dataclasses.replace(settings, split_batches=True), scheduler)
        _record_calls(wrapped, exact)
        return wrapped

    prepare.prepare_all = synced_prepare_all
    prepare.prepare_data_loader = split_loader
    prepare.prepare_scheduler = one_step_scheduler
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
        try:
            for index, batch in enumerate(base.__iter__(self)):
                if index < 64:
                    exact.recorder.write({"event": "batch", "loader": self._accelify_verify_ordinal, "epoch": epoch,
                                          "index": index, "sum": batch_fingerprint(batch, torch)})
                share = exact.split(batch, rank, world) if world > 1 else batch
                exact.recorder.in_epoch = True  # the prepared loader reads one batch ahead: its epoch ends here,
                yield share
            exact.recorder.in_epoch = False  # after the script's last batch, as in the original's loader
        finally:
            exact.share = None

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
