"""Model helpers of the Accelerator: unwrapping, parameter rebinding, DDP diagnostics, atomic model files."""

from __future__ import annotations

import json
import os
import re
import weakref
from typing import Any, Iterable, Mapping

import torch

from .files import atomic_write
from .errors import ConfigurationError
from .precision import detach_autocast

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def unwrap(model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True) -> torch.nn.Module:
    """The user's module inside DDP/DataParallel wrappers (and inside ``torch.compile`` unless kept)."""
    compiled = None
    chain = [model]  # every layer: autocast may sit on any of them (on the compiled wrapper, typically)
    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, torch.nn.Module):
            compiled = model if compiled is None else compiled
            model = model._orig_mod
        else:
            break
        chain.append(model)
    if not keep_fp32_wrapper:
        for layer in chain:
            detach_autocast(layer)
    if keep_torch_compile and compiled is not None:
        return compiled
    return model


REPLACED_PARAMETERS = "_accelify_replaced_params"  # on a prepared model: id(old parameter) -> (weakref, name)


def remember_replaced(model: torch.nn.Module, old: Mapping[int, tuple[Any, str]]) -> None:
    """Record, weakly, the parameters ``model`` had before preparing replaced them (``id -> (weakref, name)``).

    An optimizer prepared in a later ``prepare`` call still holds those; :func:`rebind_optimizer` finds
    them here. Weak: the old tensors are freed when nothing else holds them.
    """
    model.__dict__[REPLACED_PARAMETERS] = dict(old)


def rebind_optimizers(before: Mapping[str, torch.nn.Parameter], model: torch.nn.Module, optimizers: list[Any]) -> None:
    """Point ``optimizers`` at ``model``'s parameters when placement replaced them (``before``: name -> old)."""
    after = dict(model.named_parameters())
    if all(after.get(name) is old for name, old in before.items()):
        return  # the usual case: Module.to() keeps the Parameter objects
    remember_replaced(model, {id(old): (weakref.ref(old), name) for name, old in before.items() if after.get(name) is not old})
    for opt in optimizers:
        rebind_optimizer(opt, [model])


def rebind_optimizer(optimizer: Any, models: Iterable[torch.nn.Module], *, keep_state: bool = True) -> int:
    """Point ``optimizer`` at ``models``' new parameters where it still holds ones that preparing replaced.

    For an optimizer built before its model was prepared but prepared in the same or a later call;
    otherwise it would update tensors the model no longer uses. Its state follows each parameter;
    with ``keep_state=False`` (FSDP, where old and new shapes differ) existing state is a
    ``ConfigurationError``. Returns how many parameters were replaced.
    """
    optimizer = getattr(optimizer, "optimizer", optimizer)
    lookup: dict[int, tuple[Any, str, dict[str, torch.Tensor]]] = {}
    for model in models:
        inner = model.module if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)) else model
        old = inner.__dict__.get(REPLACED_PARAMETERS)
        if old:
            new_params = {k.replace("_checkpoint_wrapped_module.", ""): v for k, v in inner.named_parameters()}
            lookup.update({key: (ref, name, new_params) for key, (ref, name) in old.items()})
    if not lookup:
        return 0
    replaced = 0
    for group in optimizer.param_groups:
        params = []
        for param in group["params"]:
            ref, name, new_params = lookup.get(id(param), (None, "", {}))
            if ref is not None and ref() is param:
                new = new_params[name.replace("_checkpoint_wrapped_module.", "")]
                if param in optimizer.state:
                    if not keep_state and optimizer.state.get(param):
                        raise ConfigurationError(
                            f"The optimizer already took a step for {name!r}; prepare the model and optimizer before training with FSDP."
                        )
                    optimizer.state[new] = optimizer.state.pop(param)
                param = new
                replaced += 1
            params.append(param)
        group["params"] = params
    return replaced


def unused_parameters_message(module: torch.nn.Module, error: str) -> str:
    """Explain DDP's "Expected to have finished reduction" error with the parameters' names and the fix."""
    trainable = [name for name, p in module.named_parameters() if p.requires_grad]
    names: list[str] = []
    match = re.search(r"Parameter indices which did not receive grad for rank \d+: ([\d ]+)", error)
    if match:
        names = [trainable[int(i)] for i in match.group(1).split() if int(i) < len(trainable)]
    match = re.search(r"Parameters which did not receive grad for rank \d+: ([\w., ]+)", error)
    if not names and match:
        names = [n.strip() for n in match.group(1).split(",") if n.strip()]
    if not names:
        names = [name for name, p in module.named_parameters() if p.requires_grad and p.grad is None]
    listed = ", ".join(names) if names else "(could not tell which)"
    return (
        "DistributedDataParallel found parameters that received no gradient in the previous step: "
        f"{listed}. Either use them in every forward pass (or set requires_grad=False on them), or create "
        "the accelerator as `Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])` "
        "(from accelify.runtime import DistributedDataParallelKwargs)."
    )


def save_atomic(obj: Any, f: Any, safe_serialization: bool = False) -> None:
    """``torch.save(obj, f)`` (or safetensors for a dict of tensors), atomically when ``f`` is a path."""
    if safe_serialization:
        from safetensors.torch import save_file

        if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise ConfigurationError("save(..., safe_serialization=True) needs a dict of tensors (a state_dict).")
        tensors = {k: v.detach().contiguous() for k, v in obj.items()}
        atomic_write(os.fspath(f), lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
        return
    if isinstance(f, (str, os.PathLike)):
        atomic_write(os.fspath(f), lambda tmp: torch.save(obj, tmp))
    else:
        torch.save(obj, f)  # a file object or buffer the caller owns


def parse_size(size: int | str) -> int:
    """``"10GB"`` -> 10_000_000_000; ``"5MiB"`` -> 5_242_880; ints pass through."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)\s*", str(size).upper())
    if not match:
        raise ConfigurationError(f"max_shard_size={size!r} is not a size; write it like 500MB, 10GB or 2GiB.")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _dedupe_shared(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Keep one name per shared storage (tied weights): safetensors refuses aliases."""
    seen: set[tuple[Any, int, tuple[int, ...]]] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous()
    return out


def save_model_files(
    state_dict: Mapping[str, Any], directory: str | os.PathLike[str], max_shard_size: int | str = "10GB", safe: bool = True
) -> list[str]:
    """Write ``state_dict`` as Hugging Face model files; returns the file names written.

    One file (``model.safetensors`` / ``pytorch_model.bin``) when it fits in ``max_shard_size``, else
    ``model-00001-of-00003.safetensors``... plus ``model.safetensors.index.json``. safetensors is used
    when ``safe`` and installed, torch format otherwise. Tied weights are written once.
    """
    limit = parse_size(max_shard_size)
    if safe:
        try:
            from safetensors.torch import save_file
        except ImportError:
            safe = False
    tensors = _dedupe_shared(state_dict) if safe else dict(state_dict)
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    stem, ext = ("model", "safetensors") if safe else ("pytorch_model", "bin")
    os.makedirs(directory, exist_ok=True)
    names = (
        [f"{stem}.{ext}"] if len(shards) == 1 else [f"{stem}-{i:05d}-of-{len(shards):05d}.{ext}" for i in range(1, len(shards) + 1)]
    )
    for name, shard in zip(names, shards):
        path = os.path.join(directory, name)
        if safe:
            atomic_write(path, lambda tmp, s=shard: save_file(s, tmp, metadata={"format": "pt"}))
        else:
            atomic_write(path, lambda tmp, s=shard: torch.save(s, tmp))
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values() if isinstance(t, torch.Tensor))},
            "weight_map": {key: name for name, shard in zip(names, shards) for key in shard},
        }
        text = json.dumps(index, indent=2, sort_keys=True) + "\n"

        def write_index(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)

        atomic_write(os.path.join(directory, f"{stem}.{ext}.index.json"), write_index)
        names.append(f"{stem}.{ext}.index.json")
    return names
