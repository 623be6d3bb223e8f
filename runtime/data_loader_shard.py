"""The prepared data loader: :class:`DataLoaderShard` iterates this process's shard on its device.

It moves each batch to the device (:func:`send_to_device`), flags the last batch of the epoch and
the samples duplicated to even it out (read by ``gather_for_metrics`` through
:func:`active_data_loader`), advances the epoch, and saves and restores its position. Building one
from a plain ``DataLoader`` is :mod:`.data_loader`'s job; the sharding itself is :mod:`.samplers`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch.utils.data import DataLoader

from .errors import ConfigurationError
from .samplers import IterableDatasetShard, ShardedBatchSampler, UnbatchedSampler, sync_rng_states


_ACTIVE: list["DataLoaderShard"] = []  # loaders being iterated, innermost last


def active_data_loader() -> "DataLoaderShard | None":
    """The innermost prepared loader being iterated right now (``gather_for_metrics`` reads its flags)."""
    return _ACTIVE[-1] if _ACTIVE else None


def send_to_device(data: Any, device: torch.device | str | None, non_blocking: bool = False) -> Any:
    """``data`` (tensors in nested lists/tuples/dicts/namedtuples, or objects with ``.to``) moved to ``device``."""
    if device is None:
        return data
    if isinstance(data, torch.Tensor):  # (already there: kept as is, which is what .to would return)
        return data if data.device == device else data.to(device, non_blocking=non_blocking)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*[send_to_device(v, device, non_blocking) for v in data])
    if type(data) is list:  # the common batch: no subclass to rebuild
        return [send_to_device(v, device, non_blocking) for v in data]
    if isinstance(data, (list, tuple)):
        return type(data)([send_to_device(v, device, non_blocking) for v in data])
    if isinstance(data, Mapping):
        moved = {k: send_to_device(v, device, non_blocking) for k, v in data.items()}
        try:
            return type(data)(moved)
        except TypeError:
            return moved
    if hasattr(data, "to") and callable(data.to) and not isinstance(data, (str, bytes)):
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:
            return data.to(device)
    return data


@dataclass
class _Progress:
    """Where a loader is in its epochs; shared by a loader and the views ``skip_first_batches`` makes."""

    epoch: int = 0
    batches_yielded: int = 0  # batches of this process handed out in the current epoch (skipped ones included)
    iterating: bool = False
    mid_epoch: bool = False  # an epoch was started and has not run to its end
    end_of_dataloader: bool = False
    remainder: int = -1


class DataLoaderShard(DataLoader):
    """A ``DataLoader`` over this process's shard that moves batches to ``device``.

    With two processes, ``prepare_data_loader(DataLoader(range(10), batch_size=2))`` gives process 0
    ``[0,1],[4,5],[8,9]`` and process 1 ``[2,3],[6,7],[0,1]``; ``len()`` is 3 on both. While the last
    batch is handed out ``end_of_dataloader`` is True and ``remainder`` is 2 (samples duplicated to
    even out the last round, over all processes; -1 when unknown). The epoch advances after each full
    pass and is passed to ``set_epoch`` of the sampler and dataset when they have one.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        device: torch.device | str | None = None,
        rng_types: Sequence[str] = (),
        non_blocking: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
        **dataloader_kwargs: Any,
    ) -> None:
        super().__init__(dataset, **dataloader_kwargs)
        self.device = torch.device(device) if isinstance(device, str) else device
        self.rng_types = list(rng_types)
        self.non_blocking = non_blocking
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self._progress = _Progress()
        self._skip = 0
        self._fixed_remainder: int | None = None  # known up front (pre-sharded loaders)

    # -- flags read by the Accelerator ---------------------------------------------------------------
    @property
    def end_of_dataloader(self) -> bool:
        """True while the last batch of the epoch is being handed out."""
        return self._progress.end_of_dataloader

    @property
    def remainder(self) -> int:
        """Samples duplicated over all processes to even out the last batch (exact at the end; -1 unknown)."""
        return self._progress.remainder

    @property
    def iterating(self) -> bool:
        """True between the first and the last batch of an epoch."""
        return self._progress.iterating

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass belongs to."""
        return self._progress.epoch

    @property
    def _sharded(self) -> ShardedBatchSampler | None:
        sampler = self.batch_sampler if self.batch_sampler is not None else self.sampler
        if isinstance(sampler, UnbatchedSampler):
            return sampler.sharded
        return sampler if isinstance(sampler, ShardedBatchSampler) else None

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all processes (``None`` for batch samplers of varying size)."""
        size = self.batch_size
        if size is None:
            return None
        return size * self.num_processes

    @property
    def total_dataset_length(self) -> int:
        """Length of the whole dataset (not of this process's shard)."""
        return len(self.dataset)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDatasetShard):
            samples = self.dataset.samples_per_process()
            per_step = self.batch_size or 1
            return max(samples // per_step - self._skip, 0)
        return max(super().__len__() - self._skip, 0)

    def set_epoch(self, epoch: int) -> None:
        """Start the next pass at ``epoch``; passed on to the sampler and dataset when they take it."""
        self._progress.epoch = epoch
        sharded = self._sharded
        if sharded is not None:
            sharded.set_epoch(epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    # -- checkpointing ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Epoch, batches handed out in it, and how its order was drawn (plain types and tensors only)."""
        p = self._progress
        sharded = self._sharded
        record = sharded.current_record if (p.mid_epoch and sharded is not None) else None
        return {
            "epoch": p.epoch,
            "batches_yielded": p.batches_yielded if p.mid_epoch else 0,
            "permutation": record,
            "num_processes": self.num_processes,
            "process_index": self.process_index,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`: the next pass is the saved epoch, in the saved order.

        It does not skip by itself: follow with ``skip_first_batches(loader, state["batches_yielded"])``
        to continue where the saved run stopped.
        """
        if "epoch" not in state:
            raise ConfigurationError(
                f"Data loader state has no 'epoch' (keys: {sorted(state)}); pass what DataLoaderShard.state_dict() returned."
            )
        p = self._progress
        p.epoch = int(state["epoch"])
        p.batches_yielded = int(state.get("batches_yielded", 0))
        record = state.get("permutation")
        p.mid_epoch = record is not None
        sharded = self._sharded
        if sharded is not None:
            sharded.pending_record = dict(record) if record is not None else None

    # -- iteration -------------------------------------------------------------------------------------
    def _final_remainder(self) -> int:
        if self.num_processes == 1 and self._fixed_remainder is None:
            return 0
        if self._fixed_remainder is not None:
            return self._fixed_remainder
        sharded = self._sharded
        if sharded is not None:
            return sharded.padded
        shard = self.dataset
        if isinstance(shard, IterableDatasetShard):
            if self.num_workers == 0:
                return shard.padded
            try:
                total = len(shard)
            except TypeError:
                return -1
            if shard.drop_last or total % shard.global_batch_size == 0:
                return 0
            return shard.global_batch_size - total % shard.global_batch_size
        return -1

    def _open(self, replay: bool) -> Iterator[Any]:
        """The underlying iterator; a replayed epoch must not draw from the RNGs again (they were restored)."""
        if not replay:
            return super().__iter__()
        saved = torch.get_rng_state()
        generator_state = self.generator.get_state() if self.generator is not None else None
        try:
            return super().__iter__()
        finally:
            torch.set_rng_state(saved)
            if generator_state is not None:
                self.generator.set_state(generator_state)

    def __iter__(self) -> Iterator[Any]:
        return _ShardIterator(self, self._batches())

    def _batches(self) -> Iterator[Any]:
        """This process's batches of one epoch, moved to its device."""
        p = self._progress
        sharded = self._sharded
        replay = sharded is not None and sharded.pending_record is not None
        if self.num_processes > 1 and self.rng_types:
            sync_rng_states(self.rng_types, self.generator, self.num_processes)
        self.set_epoch(p.epoch)
        skip = self._skip
        if sharded is not None:
            sharded.skip_next, skip_here = skip, 0
        else:
            skip_here = skip
        p.iterating, p.mid_epoch, p.end_of_dataloader, p.remainder = True, True, False, -1
        p.batches_yielded = skip
        _ACTIVE.append(self)
        try:
            batches = self._open(replay)
            index = 0
            try:
                current = next(batches)
            except StopIteration:
                p.end_of_dataloader, p.remainder = True, self._final_remainder()
                p.mid_epoch, p.batches_yielded = False, 0
                p.epoch += 1
                return
            while True:
                try:
                    upcoming = next(batches)
                except StopIteration:
                    p.end_of_dataloader, p.remainder = True, self._final_remainder()
                    if index >= skip_here:
                        p.batches_yielded += 1
                        yield send_to_device(current, self.device, self.non_blocking)
                    break
                if index >= skip_here:
                    p.batches_yielded += 1
                    yield send_to_device(current, self.device, self.non_blocking)
                index += 1
                current = upcoming
            p.mid_epoch, p.batches_yielded = False, 0
            p.epoch += 1
        finally:
            p.iterating = False
            if self in _ACTIVE:
                _ACTIVE.remove(self)


class _ShardIterator:
    """An epoch's iterator over a prepared loader that, as torch's own loader iterators do, has the loader's length
    (``it = iter(loader)`` then ``while i < len(it): x = next(it)``, a layout people write)."""

    def __init__(self, loader: DataLoaderShard, batches: Iterator[Any]) -> None:
        self._loader, self._batches = loader, batches

    def __iter__(self) -> "_ShardIterator":
        return self

    def __next__(self) -> Any:
        return next(self._batches)

    def __len__(self) -> int:
        return len(self._loader)

    def close(self) -> None:
        """Ends the epoch early (as a generator's ``close``)."""
        self._batches.close()  # type: ignore[attr-defined]
