"""How ``accelify_verify_recorder`` gets into torch: patches that call the recorder, and the import hook that
applies them as soon as the script imports torch. Each patch calls the original and returns what it returns.

- ``torch.autograd.backward`` (``loss.backward()`` and ``accelerator.backward(loss)`` both end there): the loss
  value, before the original runs; a backward inside a backward (reentrant checkpointing) is not counted again;
- the global optimizer step post-hook (``torch.optim.optimizer.register_optimizer_step_post_hook``): after every
  real step of every optimizer (a step an accumulating or skipping wrapper does not take is not a step);
- ``DistributedDataParallel.__init__`` and ``forward``: which parameters each wrapper holds, how often its forward ran;
- ``DataLoader.__iter__`` and ``_BaseDataLoaderIter.__next__``: where each loader is iterated, its length, and every
  batch drawn (a prepared loader's own iteration goes through them too); under the epoch limit
  (``accelify_verify_loaders.py``) the iterator ends after the limit's batches, and ``DataLoader.__len__`` says so.

Like the recorder, this module imports nothing of accelify and nothing but torch.
"""

from __future__ import annotations

import functools
import importlib.abc
import math
import sys
import threading
from types import ModuleType
from typing import Any, Callable


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after a top-level package finished importing (torch, numpy), once."""

    def __init__(self, callbacks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.callbacks = callbacks

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        callback = self.callbacks.get(name)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        del self.callbacks[name]
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            callback(module)

        loader.exec_module = exec_module  # this spec's loader only
        return spec


def patch_torch(torch: ModuleType, recorder: Any) -> None:
    """Route torch's backward, optimizer steps, DDP wrapping and data loading through ``recorder``'s ``on_*``."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    backward = torch.autograd.backward
    inside = threading.local()

    @functools.wraps(backward)
    def recording_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if not recorder.active or getattr(inside, "value", False):
            return backward(tensors, *args, **kwargs)
        inside.value = True
        try:
            scale = recorder.on_backward(tensors)
            if scale != 1.0:
                args, kwargs = _scaled_gradient(tensors, args, kwargs, scale, torch)
            return backward(tensors, *args, **kwargs)
        finally:
            inside.value = False

    torch.autograd.backward = recording_backward
    register_optimizer_step_post_hook(recorder.on_step)

    ddp_init, ddp_forward = DistributedDataParallel.__init__, DistributedDataParallel.forward

    @functools.wraps(ddp_init)
    def init(module: Any, *args: Any, **kwargs: Any) -> None:
        ddp_init(module, *args, **kwargs)
        recorder.on_wrap(module)

    @functools.wraps(ddp_forward)
    def forward(module: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.on_wrapper_forward(module)
        return ddp_forward(module, *args, **kwargs)

    DistributedDataParallel.__init__ = init
    DistributedDataParallel.forward = forward

    loader_iter, iter_next = DataLoader.__iter__, _BaseDataLoaderIter.__next__

    loader_len = DataLoader.__len__

    @functools.wraps(loader_iter)
    def iterate(loader: Any) -> Any:
        if not recorder.active:
            return loader_iter(loader)
        key = recorder.on_iter(loader, sys._getframe(1))  # at the epoch limit the process ends here
        iterator = loader_iter(loader)
        try:
            iterator._accelify_verify_key = key
            iterator._accelify_verify_left = recorder.loader_limit(loader)
            iterator.__dict__.pop("_accelify_verify_ended", None)  # persistent workers: the same iterator again
        except AttributeError:  # an iterator type that takes no attributes: not counted
            pass
        return iterator

    @functools.wraps(iter_next)
    def draw(iterator: Any) -> Any:
        state = iterator.__dict__
        key = state.get("_accelify_verify_key")
        if key is None:
            return iter_next(iterator)
        left = state.get("_accelify_verify_left")
        try:
            if left is not None and left <= 0:  # the epoch limit: this epoch ends here, as a shorter loader's would
                raise StopIteration
            batch = iter_next(iterator)
        except StopIteration:
            if state.get("_accelify_verify_ended") is None:
                state["_accelify_verify_ended"] = True
                recorder.on_epoch_end(key)
            raise
        if left is not None:
            state["_accelify_verify_left"] = left - 1
        recorder.on_draw(key, batch)
        return batch

    @functools.wraps(loader_len)
    def length(loader: Any) -> int:
        whole = loader_len(loader)
        limit = recorder.loader_limit(loader) if recorder.active else None
        return whole if limit is None else min(whole, limit)

    DataLoader.__iter__ = iterate
    _BaseDataLoaderIter.__next__ = draw
    DataLoader.__len__ = length


def _scaled_gradient(tensors: Any, args: tuple[Any, ...], kwargs: dict[str, Any], scale: float,
                     torch: ModuleType) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``backward``'s arguments with the gradient of a one-element loss given as ``scale`` (exact mode's sums); as
    they were when the caller passed a gradient of its own."""
    loss = tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        return args, kwargs
    gradient = torch.full_like(loss, scale)
    if args:
        if args[0] is not None:
            return args, kwargs
        return (gradient, *args[1:]), kwargs
    if kwargs.get("grad_tensors") is not None:
        return args, kwargs
    return args, {**kwargs, "grad_tensors": gradient}


def leading_size(batch: Any, tensor_type: type, depth: int = 0) -> int | None:
    """Samples in a batch: the first dimension of its first tensor (in nested tuples, lists and dicts)."""
    if isinstance(batch, tensor_type):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth < 4:
        items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
        for item in items:
            size = leading_size(item, tensor_type, depth + 1)
            if size is not None:
                return size
    return None


def batches_per_epoch(loader: Any) -> int | None:
    """``len(loader)`` without tripping torch's length warning for iterable datasets; None when unknown."""
    from torch.utils.data import DataLoader

    try:
        if getattr(loader, "_dataset_kind", 0) == 1 and type(loader).__len__ is DataLoader.__len__:
            samples = len(loader.dataset)
            if loader.batch_size is None:
                return samples
            per_batch = loader.batch_size
            return samples // per_batch if loader.drop_last else math.ceil(samples / per_batch)
        return len(loader)
    except TypeError:
        return None
