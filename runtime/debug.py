"""Checks that turn a collective that would hang or crash into an error naming every process.

In debug mode (``Accelerator(debug=True)``, ``ACCELIFY_DEBUG_MODE=1`` / ``ACCELERATE_DEBUG_MODE=1``,
``accelify launch --debug``) every collective first exchanges a small descriptor (operation, the
``file:line`` that called it, the input shapes) through the process group's store, then compares:

* processes in different collectives (process 0 in ``gather``, process 1 in ``wait_for_everyone``)
  -> an error listing each process's operation and call site;
* shapes that the operation cannot combine -> Hugging Face Accelerate's message, one line per process;
* a process that exits while others wait for it -> at once, an error naming it and the collective
  the others wait in (``file:line``); one that never arrives -> the same after the process-group
  timeout (every process that did arrive raises it, so none hangs). How: :mod:`.debug_exchange`.

Outside debug mode, ``gather``/``reduce``/``broadcast`` still compare a 2-number signature of their
inputs (one tiny collective) so a shape mismatch is an error instead of a crash inside Gloo/NCCL.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import zlib
from typing import Any, Iterator, Mapping

import torch

from . import debug_exchange
from .errors import DistributedOperationException

_RUNTIME_DIR = os.path.dirname(os.path.abspath(__file__))
_OPERATION: contextvars.ContextVar[str | None] = contextvars.ContextVar("accelify_operation", default=None)
# Debug mode is process-wide, like the process group. This module owns the flag (the process state sets
# it, and reads it here) so that nothing here imports the state: state -> debug, never back.
_MODE: dict[str, bool] = {}


def set_debug_mode(enabled: bool) -> None:
    """Turn debug mode on or off for this process (``PartialState`` and ``Accelerator(debug=...)`` call it)."""
    _MODE["enabled"] = bool(enabled)


def debug_enabled() -> bool:
    """Whether debug mode is on: as last set, else (before any ``PartialState``) as the settings say."""
    if "enabled" not in _MODE:
        from .launch_settings import load_launch_settings

        _MODE["enabled"] = bool(load_launch_settings().debug)
    return _MODE["enabled"]


@contextlib.contextmanager
def named_operation(name: str) -> Iterator[None]:
    """Report collectives run inside this block as ``name`` (e.g. ``"Accelerator.gather_for_metrics"``)."""
    token = _OPERATION.set(name)
    try:
        yield
    finally:
        _OPERATION.reset(token)


def operation_name(default: str) -> str:
    """The name a collective reports: the enclosing :func:`named_operation`, else ``default``."""
    return _OPERATION.get() or default


def call_site() -> str:
    """``file:line`` of the innermost caller outside accelify.runtime."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_RUNTIME_DIR + os.sep):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    path = frame.f_code.co_filename
    try:
        rel = os.path.relpath(path)
        path = path if rel.startswith("..") else rel
    except ValueError:
        pass
    return f"{path}:{frame.f_lineno}"


def shape_tree(data: Any) -> Any:
    """Shapes of the tensors in ``data`` as plain lists (``[1, 5]``), keeping lists/tuples/dicts."""
    if isinstance(data, torch.Tensor):
        return list(data.shape)
    if isinstance(data, Mapping):
        return {k: shape_tree(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [shape_tree(v) for v in data]
    return type(data).__name__


def dtype_tree(data: Any) -> Any:
    """Dtypes of the tensors in ``data``, shaped like :func:`shape_tree`."""
    if isinstance(data, torch.Tensor):
        return str(data.dtype).replace("torch.", "")
    if isinstance(data, Mapping):
        return {k: dtype_tree(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [dtype_tree(v) for v in data]
    return type(data).__name__


def _first_tensor(data: Any) -> torch.Tensor | None:
    if isinstance(data, torch.Tensor):
        return data
    values = data.values() if isinstance(data, Mapping) else data if isinstance(data, (list, tuple)) else ()
    for value in values:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None


def _pad_compatible(trees: list[Any], dim: int) -> bool:
    """Whether tensors can be padded along ``dim``: same structure, rank and sizes elsewhere."""
    first = trees[0]
    if isinstance(first, dict):
        return all(isinstance(t, dict) and t.keys() == first.keys() for t in trees) and all(
            _pad_compatible([t[k] for t in trees], dim) for k in first
        )
    if isinstance(first, list) and all(isinstance(x, int) for x in first):  # one tensor's shape
        if not all(isinstance(t, list) and len(t) == len(first) for t in trees):
            return False
        d = dim if dim >= 0 else len(first) + dim
        if not 0 <= d < len(first):
            return all(t == first for t in trees)
        return all(t[:d] + t[d + 1 :] == first[:d] + first[d + 1 :] for t in trees)
    if isinstance(first, list):
        return all(isinstance(t, list) and len(t) == len(first) for t in trees) and all(
            _pad_compatible([t[i] for t in trees], dim) for i in range(len(first))
        )
    return all(t == first for t in trees)


def _process_lines(values: list[Any]) -> str:
    return "\n".join(f"  - Process {i}: {v}" for i, v in enumerate(values))


def shape_mismatch_message(operation: str, shapes: list[Any], sites: list[str] | None = None) -> str:
    """Hugging Face Accelerate's debug-mode message, plus where each process called from."""
    message = (
        "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid."
        f"\n\nOperation: `{operation}`\nInput shapes:\n{_process_lines(shapes)}"
    )
    if sites:
        message += f"\nCalled from:\n{_process_lines(sites)}"
    return message


def _verdict(descriptors: list[dict[str, Any]]) -> str | None:
    """The error message for these per-process descriptors, or None when the operation can proceed."""
    ops = [d["op"] for d in descriptors]
    sites = [d["site"] for d in descriptors]
    if len(set(ops)) > 1:
        lines = "\n".join(f"  - Process {i}: `{op}` at {site}" for i, (op, site) in enumerate(zip(ops, sites)))
        return (
            "Processes entered different collective operations; every process must call the same collectives "
            f"in the same order, or the program hangs.\n\n{lines}\n\n"
            "Look for a collective inside a branch that only some processes take (e.g. `if accelerator.is_main_process:`)."
        )
    rule = descriptors[0]["rule"]
    shapes = [d["shapes"] for d in descriptors]
    if rule == "same" and any(s != shapes[0] for s in shapes):
        return shape_mismatch_message(ops[0], shapes, sites)
    if rule.startswith("pad:") and not _pad_compatible(shapes, int(rule[4:])):
        return shape_mismatch_message(ops[0], shapes, sites)
    dtypes = [d["dtypes"] for d in descriptors]
    if rule == "same" and any(t != dtypes[0] for t in dtypes):
        return (
            "Cannot apply desired operation due to dtype mismatches. All dtypes across devices must match."
            f"\n\nOperation: `{ops[0]}`\nInput dtypes:\n{_process_lines(dtypes)}\nCalled from:\n{_process_lines(sites)}"
        )
    return None


def check_collective(operation: str, data: Any = None, *, rule: str = "same") -> None:
    """In debug mode with several processes, agree on ``operation`` and ``data``'s shapes or raise.

    ``rule`` is ``"same"`` (all shapes equal), ``"pad:<dim>"`` (equal except along dim) or ``"none"``.
    With two processes in debug mode, process 0 calling ``gather(torch.zeros(1, 5))`` while process 1
    calls ``gather(torch.zeros(1, 2, 5))`` raises :class:`DistributedOperationException` on both.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    if not debug_enabled():
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    descriptor = {
        "op": operation,
        "site": call_site(),
        "rule": rule,
        "shapes": shape_tree(data) if rule != "none" else None,
        "dtypes": dtype_tree(data) if rule != "none" else None,
    }
    if debug_exchange.store_available():
        descriptors = debug_exchange.exchange(descriptor, rank, world)
    else:
        descriptors = [None] * world
        dist.all_gather_object(descriptors, descriptor)
    message = _verdict(descriptors)
    if message is not None:
        raise DistributedOperationException(message)


def debug_checkpoint(operation: str) -> None:
    """Take part in debug mode's exchange from a non-tensor collective such as ``wait_for_everyone``.

    Call it right before the barrier (a no-op outside debug mode or with one process), so a process
    waiting at a barrier while another is in ``gather`` gets an error naming both instead of a hang.
    """
    check_collective(operation, None, rule="none")


def check_signature(operation: str, data: Any) -> None:
    """Outside debug mode: compare a 2-number signature of ``data`` across processes (one tiny collective).

    Gloo and NCCL crash or hang on tensors of different shapes; this turns that into the shape
    mismatch error. On a mismatch the processes exchange their full shapes to build the message.
    """
    import torch.distributed as dist

    first = _first_tensor(data)
    if first is None:
        return
    shapes, dtypes = shape_tree(data), dtype_tree(data)
    signature = zlib.crc32(repr((shapes, dtypes)).encode())
    count = sum(1 for _ in _leaves(data))
    mine = torch.tensor([signature, count], dtype=torch.int64, device=first.device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    if all(torch.equal(e, everyone[0]) for e in everyone):
        return
    trees: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(trees, (shapes, dtypes, call_site()))
    all_shapes = [t[0] for t in trees]
    if any(s != all_shapes[0] for s in all_shapes):
        raise DistributedOperationException(shape_mismatch_message(operation, all_shapes, [t[2] for t in trees]))
    raise DistributedOperationException(
        "Cannot apply desired operation due to dtype mismatches. All dtypes across devices must match."
        f"\n\nOperation: `{operation}`\nInput dtypes:\n{_process_lines([t[1] for t in trees])}"
    )


def _leaves(data: Any) -> Iterator[Any]:
    if isinstance(data, Mapping):
        for value in data.values():
            yield from _leaves(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            yield from _leaves(value)
    else:
        yield data
