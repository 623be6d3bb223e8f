"""Collectives over whatever process group is initialised: gather, reduce, broadcast, padding, objects.

Each function takes a tensor or nested lists/tuples/dicts of tensors. With one process (or no
process group) it returns its input as the one-process result. In debug mode every call first
checks, across processes, that all are in the same operation with compatible shapes (see
:mod:`.debug`); outside it, ``gather``/``reduce``/``broadcast`` still turn a shape mismatch into a
:class:`~.errors.DistributedOperationException` instead of a crash in the backend.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from .debug import check_collective, check_signature, debug_checkpoint, debug_enabled, named_operation, operation_name
from .errors import ConfigurationError

__all__ = [
    "gather", "gather_object", "reduce", "broadcast", "broadcast_object_list", "pad_across_processes",
    "debug_checkpoint", "named_operation",
]

REDUCTIONS = ("sum", "mean", "max", "min", "none")


def _world_size() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def _apply(fn: Callable[[torch.Tensor], Any], data: Any, operation: str, *, strict: bool = True) -> Any:
    """``fn`` on every tensor in nested lists/tuples/namedtuples/dicts; other leaves raise (or pass if not strict)."""
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_apply(fn, v, operation, strict=strict) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_apply(fn, v, operation, strict=strict) for v in data)
    if isinstance(data, Mapping):
        out = {k: _apply(fn, v, operation, strict=strict) for k, v in data.items()}
        try:
            return type(data)(out)
        except TypeError:
            return out
    if strict:
        raise TypeError(
            f"`{operation}` works on tensors and lists/tuples/dicts of tensors, got {type(data).__name__}. "
            "Use gather_object / broadcast_object_list for other Python objects, or convert to a tensor first."
        )
    return data


def _precheck(name: str, data: Any, rule: str = "same") -> str:
    """Run the cross-process checks for one public call; returns the operation name to report."""
    operation = operation_name(f"accelify.runtime.{name}")
    if _world_size() > 1:
        if debug_enabled():
            check_collective(operation, data, rule=rule)
        elif rule == "same":
            check_signature(operation, data)
    return operation


def _all_gather_tensor(tensor: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    tensor = tensor.contiguous()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return torch.cat(parts, dim=0)


def gather(tensor: Any) -> Any:
    """Concatenate ``tensor`` from every process along the first dimension (0-d tensors become 1-d).

    With two processes, process 0 passing ``tensor([0, 1])`` and process 1 ``tensor([2, 3])`` both get
    ``tensor([0, 1, 2, 3])``; nested lists/tuples/dicts are gathered leaf by leaf. Shapes must match
    across processes (use :func:`pad_across_processes` first when the first dimension differs).
    """
    operation = _precheck("gather", tensor)
    world = _world_size()

    def one(t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(1) if t.ndim == 0 else t
        return t if world == 1 else _all_gather_tensor(t)

    return _apply(one, tensor, operation)


def gather_object(obj: Any) -> list[Any]:
    """Every process's picklable ``obj`` in one list, in process order.

    A list or tuple is concatenated (with two processes, ``[1, 2]`` and ``[3]`` give ``[1, 2, 3]``, as in
    Hugging Face Accelerate); any other object becomes one entry per process (``"a"``, ``"b"`` give
    ``["a", "b"]``; with one process, ``["a"]``).
    """
    import torch.distributed as dist

    operation = operation_name("accelify.runtime.gather_object")
    world = _world_size()
    if world == 1:
        return list(obj) if isinstance(obj, (list, tuple)) else [obj]
    check_collective(operation, None, rule="none")
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, obj)
    if all(isinstance(p, (list, tuple)) for p in parts):
        return [item for part in parts for item in part]
    return parts


def reduce(tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
    """Combine ``tensor`` over processes with ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` (or ``"none"``).

    Returns new tensors (inputs are not modified), multiplied by ``scale``. With two processes passing
    ``tensor(1.)`` and ``tensor(3.)``: ``"sum"`` gives ``tensor(4.)``, ``"mean"`` ``tensor(2.)`` (integer
    tensors become floating point), ``"max"`` ``tensor(3.)`` on both.
    """
    import torch.distributed as dist

    if reduction not in REDUCTIONS:
        raise ConfigurationError(f"reduce: reduction={reduction!r} is not supported; use one of {', '.join(REDUCTIONS)}.")
    operation = _precheck("reduce", tensor)
    world = _world_size()
    ops = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}

    def one(t: torch.Tensor) -> torch.Tensor:
        out = t.clone().contiguous()
        if world > 1 and reduction != "none":
            dist.all_reduce(out, op=getattr(dist.ReduceOp, ops[reduction]))
        if reduction == "mean":
            out = out / world  # true division: integer tensors become floating point
        if scale != 1.0:
            out = out * scale
        return out

    return _apply(one, tensor, operation)


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Overwrite ``tensor`` (in place) on every process with process ``from_process``'s values; returns it.

    With two processes, process 0 holding ``tensor([1, 2])`` and process 1 ``tensor([0, 0])``: after
    ``broadcast(t)`` both hold ``tensor([1, 2])``. Shapes must match across processes.
    """
    import torch.distributed as dist

    operation = _precheck("broadcast", tensor)
    world = _world_size()
    if world > 1 and not 0 <= from_process < world:
        raise ConfigurationError(f"broadcast: from_process={from_process} must be between 0 and {world - 1}.")

    def one(t: torch.Tensor) -> torch.Tensor:
        if world == 1:
            return t
        if t.is_contiguous():
            dist.broadcast(t, src=from_process)
        else:
            buffer = t.contiguous()
            dist.broadcast(buffer, src=from_process)
            t.copy_(buffer)
        return t

    return _apply(one, tensor, operation)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Replace the items of ``object_list`` (in place) with process ``from_process``'s; returns the list.

    With two processes, process 0 passing ``["cfg", 3]`` and process 1 ``[None, None]``: both end with
    ``["cfg", 3]``. The lists must have the same length on every process.
    """
    import torch.distributed as dist

    operation = operation_name("accelify.runtime.broadcast_object_list")
    world = _world_size()
    if world == 1:
        return object_list
    check_collective(operation, [len(object_list)], rule="none")
    dist.broadcast_object_list(object_list, src=from_process)
    return object_list


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Pad ``tensor`` along ``dim`` with ``pad_index`` to the largest size any process has there.

    With two processes holding shapes ``[2, 3]`` and ``[4, 3]``, both return ``[4, 3]`` tensors; process
    0's gets two rows of ``pad_index`` appended (prepended with ``pad_first=True``). Tensors with fewer
    than ``dim + 1`` dimensions, and non-tensor leaves, are returned unchanged.
    """
    operation = _precheck("pad_across_processes", tensor, rule=f"pad:{dim}")
    world = _world_size()

    def one(t: torch.Tensor) -> torch.Tensor:
        d = dim if dim >= 0 else t.ndim + dim
        if world == 1 or not 0 <= d < t.ndim:
            return t
        sizes = _all_gather_tensor(torch.tensor([t.shape[d]], device=t.device))
        longest = int(sizes.max())
        if longest == t.shape[d]:
            return t
        shape = list(t.shape)
        shape[d] = longest
        out = t.new_full(shape, pad_index)
        start = longest - t.shape[d] if pad_first else 0
        index = [slice(None)] * t.ndim
        index[d] = slice(start, start + t.shape[d])
        out[tuple(index)] = t
        return out

    return _apply(one, tensor, operation, strict=False)


def gather_for_metrics(input_data: Any, use_gather_object: bool = False) -> Any:
    """``Accelerator.gather_for_metrics``: gather, then drop the samples duplicated to even out the last batch.

    With two processes and 10 samples in batches of 3, the last step gathers ``[6,7,8]`` and
    ``[9,0,1]`` and returns ``[6,7,8,9]``; objects that are not tensors go through :func:`gather_object`.
    """
    from .data_loader_shard import active_data_loader

    with named_operation("Accelerator.gather_for_metrics"):
        if use_gather_object or not _all_tensors(input_data):
            data = gather_object(input_data)
            use_gather_object = True
        else:
            data = gather(input_data)
    loader = active_data_loader()
    if loader is None or not loader.end_of_dataloader or loader.remainder <= 0:
        return data
    keep = _real_samples_in_last_round(loader)
    if use_gather_object:
        return data[: len(data) - loader.remainder if keep is None else keep]
    return _apply(
        lambda t: t[: max(len(t) - loader.remainder, 0) if keep is None else keep] if t.ndim else t, data, "gather_for_metrics"
    )


def _real_samples_in_last_round(loader: Any) -> int | None:
    """Samples of the last round that are not duplicates (Hugging Face's ``remainder``); None if unknown.

    Like Hugging Face Accelerate, ``gather_for_metrics`` keeps this many leading entries: a whole
    round loses exactly its duplicates, and anything shorter (a per-batch loss gathered as one value
    per process) is kept whole instead of being cut to nothing.
    """
    from .samplers import IterableDatasetShard, ShardedBatchSampler, UnbatchedSampler

    per_process: int | None = loader.batch_size
    if isinstance(loader.dataset, IterableDatasetShard):
        per_process = loader.dataset.process_batch_size
    elif isinstance(loader.sampler, UnbatchedSampler):
        per_process = 1  # batch_size=None: one sample per step
    elif per_process is None and isinstance(loader.sampler, ShardedBatchSampler):
        per_process = loader.sampler.batch_size  # a batch sampler given as `sampler`
    if per_process is None:
        return None  # batches of varying size: only the tail can be dropped
    keep = per_process * loader.num_processes - loader.remainder
    return keep if keep >= 0 else None


def _all_tensors(data: Any) -> bool:
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, (list, tuple)):
        return all(_all_tensors(v) for v in data)
    if isinstance(data, dict):
        return all(_all_tensors(v) for v in data.values())
    return False
