"""Prepared data loaders: each process iterates its own shard, on its device, with an end-of-data flag.

``prepare_data_loader`` rebuilds a ``torch.utils.data.DataLoader`` as a :class:`DataLoaderShard`
(still a ``DataLoader``) with Hugging Face Accelerate's documented semantics: the batch size is per
process unless ``split_batches=True``; ``even_batches=True`` wraps around so every process gets the
same number of batches; shuffled loaders give every process a disjoint part of one permutation.
With one process a prepared loader yields exactly the original batches and consumes the global
torch RNG exactly as the original would. The sharding itself lives in :mod:`.samplers`, the loader
class (its iteration, flags and position) in :mod:`.data_loader_shard`; ``DataLoaderShard``,
``active_data_loader`` and ``send_to_device`` are importable from here too.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Sequence

import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset

from .data_loader_shard import DataLoaderShard, active_data_loader, send_to_device  # noqa: F401  (re-exported)
from .devices import loader_transfer
from .errors import ConfigurationError, DistributedSetupError
from .process_group import declared_processes
from .samplers import IterableDatasetShard, ShardedBatchSampler, UnbatchedSampler, check_rng_types

# DataLoader arguments carried over unchanged (those this torch version knows).
_CARRIED = tuple(
    name
    for name in (
        "num_workers", "collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context",
        "generator", "prefetch_factor", "persistent_workers", "pin_memory_device", "in_order",
    )
    if name in inspect.signature(DataLoader.__init__).parameters
)


def _resolve_processes(num_processes: int | None, process_index: int | None) -> tuple[int, int]:
    if num_processes is None or process_index is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            world, rank = dist.get_world_size(), dist.get_rank()
        else:
            variable, declared, _ = declared_processes()  # torchrun's WORLD_SIZE, or srun's / mpirun's
            if declared > 1:
                raise DistributedSetupError(
                    f"{variable}={declared} but torch.distributed is not initialised, so the loader cannot be "
                    "sharded. Create the Accelerator (or PartialState) before preparing data loaders, or pass "
                    "num_processes= and process_index= explicitly."
                )
            world, rank = 1, 0
        num_processes = world if num_processes is None else num_processes
        process_index = rank if process_index is None else process_index
    if num_processes < 1 or not 0 <= process_index < num_processes:
        raise ConfigurationError(
            f"process_index={process_index} is not valid for num_processes={num_processes}; "
            "use 0 <= process_index < num_processes."
        )
    return num_processes, process_index


def prepare_data_loader(
    dataloader: DataLoader,
    *,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    even_batches: bool = True,
    put_on_device: bool = True,
    rng_types: Sequence[Any] | None = None,
    dispatch_batches: bool | None = None,
    non_blocking: bool = False,
) -> DataLoaderShard:
    """Shard ``dataloader`` for process ``process_index`` of ``num_processes`` (default: the process group).

    The batch size is per process unless ``split_batches=True`` (then it is global and each process
    gets a slice). With two processes, ``DataLoader(range(10), batch_size=3)`` gives process 0
    ``[0,1,2],[6,7,8]`` and process 1 ``[3,4,5],[9,0,1]``. Batches go to ``device`` when
    ``put_on_device``. ``rng_types`` (``"torch"``, ``"cuda"``, ``"python"``, ``"numpy"``,
    ``"generator"``) are synchronised from process 0 at the start of each epoch; the sampler's own
    permutation is always shared, whatever ``rng_types`` says. ``dispatch_batches`` is not supported
    (only ``None``/``False``). A loader with a ``DistributedSampler`` is already sharded and is kept so.
    """
    if isinstance(dataloader, DataLoaderShard):
        return dataloader
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"prepare_data_loader needs a torch.utils.data.DataLoader, got {type(dataloader).__name__}.")
    if dispatch_batches:
        raise ConfigurationError(
            "dispatch_batches=True is not supported: every process loads its own shard. "
            "Leave dispatch_batches unset (or False)."
        )
    n, r = _resolve_processes(num_processes, process_index)
    kwargs = {name: getattr(dataloader, name) for name in _CARRIED if hasattr(dataloader, name)}
    # pinning helps copies to a GPU only, and a non-blocking copy needs it: the decision is devices.py's
    target = torch.device(device).type if device is not None else None
    kwargs["pin_memory"], non_blocking = loader_transfer(target, bool(kwargs.get("pin_memory")), non_blocking)
    common = dict(
        device=device if put_on_device else None,
        rng_types=check_rng_types(rng_types),
        non_blocking=non_blocking,
        num_processes=n,
        process_index=r,
        split_batches=split_batches,
        even_batches=even_batches,
    )
    dataset = dataloader.dataset
    size = dataloader.batch_size
    if isinstance(dataset, IterableDataset):
        if n > 1:
            dataset = IterableDatasetShard(
                dataset, batch_size=size or 1, drop_last=dataloader.drop_last,
                num_processes=n, process_index=r, split_batches=split_batches,
            )
            if size is not None and split_batches:
                size //= n
        return DataLoaderShard(dataset, batch_size=size, drop_last=dataloader.drop_last, **common, **kwargs)

    if dataloader.batch_sampler is not None:
        base: Any = dataloader.batch_sampler
    elif isinstance(dataloader.sampler, BatchSampler):
        base = dataloader.sampler
    else:  # batch_size=None: every index is its own "batch"
        base = BatchSampler(dataloader.sampler, 1, False)
    presharded = isinstance(getattr(base, "sampler", None), DistributedSampler)
    sharded = ShardedBatchSampler(
        base,
        num_processes=1 if presharded else n,
        process_index=0 if presharded else r,
        split_batches=split_batches,
        even_batches=even_batches,
    )
    if dataloader.batch_sampler is not None:
        loader = DataLoaderShard(dataset, batch_sampler=sharded, **common, **kwargs)
        per_process = sharded.batch_size
        if per_process is not None and split_batches and not presharded:
            per_process //= n
        object.__setattr__(loader, "batch_size", per_process)  # DataLoader sets None with a batch_sampler
        # the script's own sampler stays readable: ``len(loader.sampler)`` counts what the script chose to walk
        # (a SubsetRandomSampler's subset), not the whole data set (the loader iterates the batch sampler only)
        object.__setattr__(loader, "sampler", dataloader.sampler)
    elif isinstance(dataloader.sampler, BatchSampler):
        loader = DataLoaderShard(dataset, sampler=sharded, batch_size=None, **common, **kwargs)
    else:
        loader = DataLoaderShard(dataset, sampler=UnbatchedSampler(sharded), batch_size=None, **common, **kwargs)
    if presharded:
        dist_sampler = base.sampler
        padded = 0 if dist_sampler.drop_last else dist_sampler.total_size - len(dist_sampler.dataset)
        # DistributedSampler's duplicates are spread over the processes, not at the tail of a gather
        loader._fixed_remainder = 0 if padded == 0 else -1
    return loader


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoaderShard:
    """A loader that starts ``num_batches`` into the next pass of ``dataloader`` (this process's batches).

    With two processes and ``DataLoader(range(10), batch_size=2)`` prepared,
    ``skip_first_batches(loader, 1)`` gives process 0 ``[4,5],[8,9]`` and process 1 ``[6,7],[0,1]``.
    The returned loader shares the epoch and flags of ``dataloader``: after it runs to the end, the
    next pass of ``dataloader`` is the next epoch. Skipped batches of a map-style dataset are not loaded.
    """
    if num_batches < 0:
        raise ConfigurationError(f"skip_first_batches: num_batches={num_batches} must be >= 0.")
    if not isinstance(dataloader, DataLoaderShard):
        dataloader = prepare_data_loader(dataloader, num_processes=1, process_index=0, put_on_device=False)
    view = copy.copy(dataloader)
    view._skip = dataloader._skip + num_batches
    return view
