"""Freeing device memory, and retrying a function with a smaller batch on out-of-memory."""

from __future__ import annotations

import functools
import gc
import inspect
from typing import Any, Callable

import torch


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Return cached blocks of the current accelerator's allocator to the driver (no-op on CPU)."""
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop the caller's references and free memory: ``a, b = release_memory(a, b)``."""
    cleared: list[None] = [None] * len(objects)
    del objects
    clear_device_cache(garbage_collection=True)
    return cleared


# Messages of the errors that mean "this batch did not fit" (CUDA/ROCm/XPU, MPS, cuDNN, CPU allocator, HPU).
_OOM_MESSAGES = (
    "out of memory",
    "CUDNN_STATUS_NOT_SUPPORTED",
    "DefaultCPUAllocator: can't allocate memory",
    "XPU out of memory",
    "MPS backend out of memory",
    "PT_DEVMEM Allocation failed",
)


def is_out_of_memory(exception: BaseException) -> bool:
    """True when ``exception`` is an out-of-memory error a smaller batch may avoid."""
    if isinstance(exception, getattr(torch, "OutOfMemoryError", ())):
        return True
    if isinstance(exception, MemoryError):
        return True
    if not isinstance(exception, RuntimeError):
        return False
    message = str(exception.args[0]) if exception.args else ""
    return any(text in message for text in _OOM_MESSAGES)


def halve_batch_size(batch_size: int) -> int:
    """The default reduction: half the batch size, rounded down (as the troubleshooting guide documents)."""
    return batch_size // 2


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[..., int] | None = None,
) -> Any:
    """Call ``function(batch_size, *args)``, halving ``batch_size`` after each out-of-memory error.

    ``function``'s first parameter receives the batch size; call the decorated function *without* it.
    Between tries it collects garbage and empties the device cache. ``reduce_batch_size_fn`` replaces
    the halving: it is called with the failed batch size (or with no argument, Hugging Face style)
    and returns the next one. Raises ``RuntimeError`` once the batch size reaches zero.

    Example (with two processes, each process searches on its own; keep their batch sizes equal by
    making every process fail the same way)::

        accelerator = Accelerator()

        @find_executable_batch_size(starting_batch_size=128)
        def inner_training_loop(batch_size):
            nonlocal accelerator
            accelerator.free_memory()
            train_loader = DataLoader(dataset, batch_size=batch_size)
            ...

        inner_training_loop()  # tries 128, then 64, 32, ... until one fits
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size, starting_batch_size=starting_batch_size, reduce_batch_size_fn=reduce_batch_size_fn
        )
    if int(starting_batch_size) < 1:
        raise ValueError(f"starting_batch_size must be >= 1, got {starting_batch_size}.")
    reduce = _reducer(reduce_batch_size_fn)

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        params = list(inspect.signature(function).parameters)
        passed_positionally = len(args) >= len(params) > 0 and not _has_var_positional(function)
        if passed_positionally or (params and params[0] in kwargs):
            raise TypeError(
                f"{function.__name__}() was called with the batch size, but find_executable_batch_size passes it as "
                f"the first argument: call {function.__name__}() without it (only the other arguments)."
            )
        batch_size = int(starting_batch_size)
        clear_device_cache(garbage_collection=True)
        while True:
            if batch_size <= 0:
                raise RuntimeError(
                    f"No executable batch size found: {function.__name__} ran out of memory down to batch size 1 "
                    f"(started at {starting_batch_size}). Reduce the model or sequence size, or free memory held elsewhere."
                )
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - anything but OOM is re-raised below
                if not is_out_of_memory(exc):
                    raise
                exc.__traceback__ = None  # drop the frames that keep the failed batch's tensors alive
                del exc
                clear_device_cache(garbage_collection=True)
                batch_size = int(reduce(batch_size))

    return decorator


def _has_var_positional(function: Callable[..., Any]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in inspect.signature(function).parameters.values())


def _reducer(fn: Callable[..., int] | None) -> Callable[[int], int]:
    """Accept both reduction styles: ``fn(batch_size) -> int`` and Hugging Face's ``fn() -> int``."""
    if fn is None:
        return halve_batch_size
    try:
        takes_arg = any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            for p in inspect.signature(fn).parameters.values()
        )
    except (TypeError, ValueError):  # builtins without a signature
        takes_arg = True
    return fn if takes_arg else (lambda _batch_size: fn())
