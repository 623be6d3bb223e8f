"""Sharding of batch samplers and iterable datasets across processes, with a shared permutation.

:class:`ShardedBatchSampler` hands each process its own batches of the original batch sampler,
with Hugging Face Accelerate's semantics (``BatchSamplerShard``): whole batches round-robin, or
slices of each batch with ``split_batches=True``; with ``even_batches=True`` the last round is
completed with samples from the start so every process gets the same number of full batches.

It also makes every process draw the *same* permutation each epoch, and records how the
permutation was drawn so that a resumed run replays it (a ``PermutationRecord``):

* a ``RandomSampler`` without a generator: the seed is drawn from the global torch RNG exactly
  where the sampler itself would draw it (one process consumes the RNG as the original loader did),
  then process 0's seed is broadcast;
* a sampler with its own ``torch.Generator``: process 0's generator state is broadcast;
* any other sampler that may be random (unknown classes, ``SubsetRandomSampler`` and
  ``WeightedRandomSampler`` without a generator): process 0's global torch RNG state is broadcast
  and set before the sampler runs, so all processes draw alike;
* ``SequentialSampler`` and ``DistributedSampler``: nothing to synchronise.

:func:`sync_rng_states` is the ``rng_types`` option: named RNGs copied from process 0 each epoch.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, Iterable, Iterator, Sequence

import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from .errors import ConfigurationError

# A permutation record: {"kind": "seed", "seed": int} | {"kind": "generator", "state": ByteTensor}
# | {"kind": "global", "state": ByteTensor} | {"kind": "none"}. Only plain types and tensors, so
# it loads with torch.load(weights_only=True).
PermutationRecord = dict


def broadcast_from_main(value: Any, num_processes: int) -> Any:
    """Return process 0's ``value`` on every process.

    Returns ``value`` itself with one process, and also when no process group exists: that only
    happens when ranks are simulated in one process (``prepare_data_loader(num_processes=2,
    process_index=i)`` called explicitly), which must then seed every simulated rank alike.
    """
    if num_processes == 1:
        return value
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


RNG_TYPES = ("torch", "cuda", "python", "numpy", "generator")


def check_rng_types(rng_types: Sequence[Any] | None) -> list[str]:
    """The ``rng_types`` names (strings or enum members), validated."""
    if isinstance(rng_types, str):
        rng_types = [rng_types]
    names = []
    for item in rng_types or ():
        name = str(getattr(item, "value", item)).lower()
        if name not in RNG_TYPES:
            raise ConfigurationError(f"rng_types: {item!r} is not supported; use any of {', '.join(RNG_TYPES)}.")
        names.append(name)
    return names


def sync_rng_states(rng_types: Sequence[str], generator: torch.Generator | None, num_processes: int) -> None:
    """Copy process 0's RNG states named in ``rng_types`` to every process (``generator``: the loader's)."""
    states: dict[str, Any] = {}
    if "torch" in rng_types:
        states["torch"] = torch.get_rng_state()
    if "cuda" in rng_types and torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    if "python" in rng_types:
        states["python"] = random.getstate()
    if "numpy" in rng_types:
        import numpy as np

        states["numpy"] = np.random.get_state()
    if "generator" in rng_types and generator is not None:
        states["generator"] = generator.get_state()
    states = broadcast_from_main(states, num_processes)
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"])
    if "python" in states:
        random.setstate(states["python"])
    if "numpy" in states:
        import numpy as np

        np.random.set_state(states["numpy"])
    if "generator" in states and generator is not None:
        generator.set_state(states["generator"])


def _randomness(batch_sampler: Any) -> tuple[str, Any]:
    """How ``batch_sampler`` draws its order: (kind, the object holding the randomness)."""
    source = getattr(batch_sampler, "sampler", None)
    if source is None:
        source = batch_sampler
    if isinstance(source, (SequentialSampler, DistributedSampler)) or isinstance(source, range):
        return "none", source
    generator = getattr(source, "generator", None)
    if isinstance(generator, torch.Generator):
        return "generator", source
    if isinstance(source, RandomSampler):
        return "seed", source
    return "global", source


class ShardedBatchSampler(BatchSampler):
    """The batches of ``batch_sampler`` that belong to process ``process_index`` of ``num_processes``.

    With two processes and ``BatchSampler(range(10), 2)``: process 0 gets ``[0,1],[4,5],[8,9]`` and
    process 1 ``[2,3],[6,7],[0,1]`` (the last round wrapped around); with batch size 3, process 0 gets
    ``[0,1,2],[6,7,8]`` and process 1 ``[3,4,5],[9,0,1]``. With ``split_batches=True`` and batch
    size 4 over 8 samples, process 0 gets ``[0,1],[4,5]``. With one process the batches are unchanged.
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        *,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        if split_batches and num_processes > 1 and (self.batch_size is None or self.batch_size % num_processes):
            raise ConfigurationError(
                f"split_batches=True needs a batch size that is a multiple of the number of processes "
                f"({num_processes}); the loader's batch size is {self.batch_size}. Change the batch size "
                "or use split_batches=False (then the batch size is per process)."
            )
        self.current_record: PermutationRecord | None = None  # how this epoch's order was drawn
        self.pending_record: PermutationRecord | None = None  # replay this order on the next epoch
        self.skip_next = 0  # batches of this process to skip at the start of the next epoch
        self.padded = 0  # samples duplicated (over all processes) in the last epoch

    @property
    def sampler(self) -> Any:
        """The index sampler under the original batch sampler (HF's ``BatchSamplerShard.sampler``)."""
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def total_length(self) -> int:
        """Number of batches of the original batch sampler."""
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __len__(self) -> int:
        total = len(self.batch_sampler)  # type: ignore[arg-type]
        n = self.num_processes
        if self.split_batches or n == 1:
            return total
        if total % n == 0 or self.drop_last:
            return total // n
        if self.even_batches:
            return total // n + 1
        return total // n + (1 if self.process_index < total % n else 0)

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch to the wrapped batch sampler or its sampler (``DistributedSampler``-like ones)."""
        for target in (self.batch_sampler, self.sampler):
            if target is not None and hasattr(target, "set_epoch"):
                target.set_epoch(epoch)
                return

    # -- the permutation -------------------------------------------------------------------------
    def _source(self) -> Iterator[list[int]]:
        """The original batches of this epoch, in an order every process shares."""
        kind, holder = _randomness(self.batch_sampler)
        pending, self.pending_record = self.pending_record, None
        if pending is not None and pending.get("kind") != kind:
            pending = None  # saved from a differently built loader: draw afresh
        n = self.num_processes
        if kind == "seed":
            if pending is not None:
                seed = int(pending["seed"])
            else:
                # exactly what RandomSampler.__iter__ draws when it has no generator
                seed = int(torch.empty((), dtype=torch.int64).random_().item())
                seed = int(broadcast_from_main(seed, n))
            self.current_record = {"kind": "seed", "seed": seed}
            holder.generator = torch.Generator().manual_seed(seed)
            try:
                iterator = iter(self.batch_sampler)
                first = list(itertools.islice(iterator, 1))  # the sampler reads its generator here
            finally:
                holder.generator = None
            return itertools.chain(first, iterator)
        if kind == "generator":
            if pending is not None:
                holder.generator.set_state(pending["state"])
            elif n > 1:
                holder.generator.set_state(broadcast_from_main(holder.generator.get_state(), n))
            self.current_record = {"kind": "generator", "state": holder.generator.get_state()}
            return iter(self.batch_sampler)
        if kind == "global":
            if pending is not None:
                saved = torch.get_rng_state()
                torch.set_rng_state(pending["state"])
                try:
                    batches = list(self.batch_sampler)
                finally:
                    torch.set_rng_state(saved)
                self.current_record = dict(pending)
                return iter(batches)
            if n > 1:
                torch.set_rng_state(broadcast_from_main(torch.get_rng_state(), n))
            self.current_record = {"kind": "global", "state": torch.get_rng_state()}
            return iter(self.batch_sampler)
        self.current_record = {"kind": "none"}
        return iter(self.batch_sampler)

    # -- sharding ---------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[list[int]]:
        # A generator, so the order is drawn at the first batch, where the original sampler draws it.
        skip, self.skip_next = self.skip_next, 0
        self.padded = 0
        batches = self._source()
        if self.num_processes == 1:
            mine: Iterator[list[int]] = iter(batches)
        elif self.split_batches:
            mine = self._split(batches)
        else:
            mine = self._whole(batches)
        yield from itertools.islice(mine, skip, None)

    def _split(self, batches: Iterator[list[int]]) -> Iterator[list[int]]:
        size = self.batch_size or 0
        part = size // self.num_processes
        lo, hi = part * self.process_index, part * (self.process_index + 1)
        pool: Iterator[int] | None = None
        for batch in batches:
            batch = list(batch)
            if pool is None:
                pool = itertools.cycle(batch) if batch else None
            if len(batch) < size:
                if self.drop_last:
                    continue
                if self.even_batches and pool is not None:
                    missing = size - len(batch)
                    batch += itertools.islice(pool, missing)
                    self.padded += missing
                elif len(batch) <= lo:
                    continue
            yield batch[lo:hi]

    def _whole(self, batches: Iterator[list[int]]) -> Iterator[list[int]]:
        n, r, size = self.num_processes, self.process_index, self.batch_size
        first: list[list[int]] = []  # the first round, reused to even out the last one
        group: list[list[int]] = []
        for batch in batches:
            if len(first) < n:
                first.append(list(batch))
            group.append(batch)
            if len(group) == n and (size is None or len(batch) == size):
                yield group[r]
                group = []
        if not group or self.drop_last:
            return
        if not self.even_batches:
            if r < len(group):
                yield group[r]
            return
        padded = [list(b) for b in group]
        if size is None:  # batches of varying size: complete the round with whole first batches
            reuse = itertools.cycle(first)
            while len(padded) < n:
                padded.append(next(reuse))
                self.padded += len(padded[-1])
        else:
            pool = itertools.cycle([i for b in first for i in b])
            if len(padded[-1]) < size:
                missing = size - len(padded[-1])
                padded[-1] += itertools.islice(pool, missing)
                self.padded += missing
            while len(padded) < n:
                padded.append(list(itertools.islice(pool, size)))
                self.padded += size
        yield padded[r]


class UnbatchedSampler(Sampler[int]):
    """Single indices from a sharded sampler of 1-index batches (loaders built with ``batch_size=None``)."""

    def __init__(self, sharded: ShardedBatchSampler) -> None:
        self.sharded = sharded

    def __iter__(self) -> Iterator[int]:
        for batch in self.sharded:
            yield batch[0]

    def __len__(self) -> int:
        return len(self.sharded)


class IterableDatasetShard(IterableDataset):
    """The samples of an ``IterableDataset`` that belong to one process, in whole per-process batches.

    Samples are read in global batches (``batch_size * num_processes``, or ``batch_size`` with
    ``split_batches``) and each process keeps its slice; unless ``drop_last``, the last global batch is
    completed with samples from the first one. With two processes, batch size 2 and ``range(8)``,
    process 0 gets ``0, 1, 4, 5`` and process 1 gets ``2, 3, 6, 7``.
    ``len()`` is the length of the whole wrapped dataset, so ``len(loader.dataset)`` keeps meaning
    what it meant in the single-process script.
    """

    def __init__(
        self,
        dataset: IterableDataset,
        *,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
    ) -> None:
        if split_batches and batch_size % num_processes:
            raise ConfigurationError(
                f"split_batches=True needs a batch size that is a multiple of the number of processes "
                f"({num_processes}); the loader's batch size is {batch_size}."
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.padded = 0  # samples duplicated over all processes in the last pass (main-process loading only)

    @property
    def global_batch_size(self) -> int:
        """Samples read from the dataset per step, over all processes."""
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def process_batch_size(self) -> int:
        """Samples this process keeps per step."""
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Pass the epoch on to the wrapped dataset when it takes one."""
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def samples_per_process(self) -> int:
        """Samples this process yields in one pass (needs a sized dataset)."""
        total = len(self.dataset)  # type: ignore[arg-type]
        steps = total // self.global_batch_size if self.drop_last else math.ceil(total / self.global_batch_size)
        return steps * self.process_batch_size

    def __iter__(self) -> Iterator[Any]:
        self.padded = 0
        size, keep = self.global_batch_size, self.process_batch_size
        lo, hi = keep * self.process_index, keep * (self.process_index + 1)
        first: list[Any] | None = None
        current: list[Any] = []
        for element in self.dataset:
            current.append(element)
            if len(current) == size:
                yield from current[lo:hi]
                if first is None:
                    first = current
                current = []
        if current and not self.drop_last:
            pool = itertools.cycle(first if first is not None else list(current))
            missing = size - len(current)
            current += itertools.islice(pool, missing)
            self.padded = missing
            yield from current[lo:hi]
