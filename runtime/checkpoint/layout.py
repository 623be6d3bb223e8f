"""The files inside a checkpoint folder: their names, and how each kind of state is written and read.

Layout (Hugging Face Accelerate's file names): ``model.safetensors`` (``pytorch_model.bin`` without
safetensors), ``model_<i>.*`` for later models, ``optimizer.bin``, ``scheduler.bin``, ``scaler.pt``,
``dl_state_dict.bin``, ``custom_checkpoint_<i>.pkl`` and one ``random_states_<rank>.pkl`` per process.

Reading uses ``torch.load(weights_only=True)`` (or safetensors): nothing in a checkpoint can run code.
Folder atomicity and durability are :mod:`.atomic`'s job, not this module's.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import pickle
import random
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..files import new_file_mode

SAFE_MODEL_NAME, MODEL_NAME, OPTIMIZER_NAME, SCHEDULER_NAME = "model", "pytorch_model", "optimizer", "scheduler"
SCALER_NAME, RNG_STATE_NAME, DATALOADER_NAME, CUSTOM_NAME = "scaler.pt", "random_states", "dl_state_dict", "custom_checkpoint"


def indexed(stem: str, index: int, ext: str = ".bin") -> str:
    """HF's numbering: ``optimizer.bin``, ``optimizer_1.bin``, ..."""
    return f"{stem}{ext}" if index == 0 else f"{stem}_{index}{ext}"


def rng_file_name(rank: int) -> str:
    """``random_states_<rank>.pkl``: each process's RNG states."""
    return f"{RNG_STATE_NAME}_{rank}.pkl"


def custom_file_name(index: int) -> str:
    """``custom_checkpoint_<i>.pkl``: the i-th object given to ``register_for_checkpointing``."""
    return f"{CUSTOM_NAME}_{index}.pkl"


def write_state(path: Path, obj: Any) -> Path:
    """``torch.save`` ``obj`` to ``path`` (written by torch's own file writer: no Python file object)."""
    torch.save(obj, os.fspath(path))
    return path


@functools.cache
def safetensors_available() -> bool:
    """True when the ``safetensors`` package is installed."""
    return importlib.util.find_spec("safetensors") is not None


def write_weights(directory: Path, index: int, state: dict[str, torch.Tensor], safe: bool) -> Path:
    """Write model ``index``'s state dict; tied tensors are stored once and re-linked on load.

    ``model.safetensors`` when ``safe`` and safetensors is installed, ``pytorch_model.bin`` otherwise.
    """
    if not (safe and safetensors_available()):
        return write_state(directory / indexed(MODEL_NAME, index), state)
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    for name, tensor in state.items():
        tensor = tensor.detach()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
        if tensor.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        shares = tensor.numel() > 0 and key[0] in storages
        storages.add(key[0])
        tensor = tensor.cpu()
        tensors[name] = tensor.clone() if shares or not tensor.is_contiguous() else tensor  # safetensors needs both
    path = directory / indexed(SAFE_MODEL_NAME, index, ".safetensors")
    save_file(tensors, os.fspath(path), metadata={"format": "pt", "accelify_aliases": json.dumps(aliases)})
    os.chmod(path, new_file_mode())  # safetensors creates its files 0600 whatever the umask
    return path


def unreadable(path: Path, what: str, exc: BaseException) -> CheckpointError:
    """The error for a file that exists but cannot be read back (truncated, damaged, not a checkpoint file)."""
    text = str(exc).strip() or ("the file ends too early" if isinstance(exc, EOFError) else "no detail")
    if len(text) > 120:  # torch's zip reader adds a paragraph of advice after its first sentence
        text = text.split(". ")[0]
    detail = f"{type(exc).__name__}: {text}"
    return CheckpointError(f"{path} ({what}) cannot be read ({detail}): it is truncated, damaged or unreadable.")


def _missing(shown: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"{shown} ({what}) is missing; was this folder written by save_state with the same objects prepared?"
    )


def read_state(path: Path, what: str, map_location: Any = "cpu") -> Any:
    """torch.load with ``weights_only=True``, or a CheckpointError naming the file and what is wrong with it.

    A missing file, a damaged one (truncated by a full disk or an interrupted copy: torch raises
    ``OSError: [Errno 22] Invalid argument``, ``EOFError`` or a zip-reader ``RuntimeError``), and one
    holding types that safe loading refuses (the message says how to allow them) are told apart.
    """
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise _missing(str(path), what) from None
    except pickle.UnpicklingError as exc:
        if "weights only load failed" not in str(exc).lower():
            raise unreadable(path, what, exc) from exc
        try:
            names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # noqa: BLE001 - the names only improve the message
            names = []
        listed = ", ".join(names) or "see the cause below"
        raise CheckpointError(
            f"{path} ({what}) holds types that safe loading (torch.load weights_only=True) does not allow: {listed}. "
            "If you trust this checkpoint, allow-list them before load_state with "
            f"torch.serialization.add_safe_globals([{', '.join(n.rsplit('.', 1)[-1] for n in names) or '...'}])."
        ) from exc
    except (OSError, EOFError, RuntimeError, ValueError, KeyError, IndexError) as exc:
        raise unreadable(path, what, exc) from exc


def read_weights(directory: Path, index: int) -> dict[str, torch.Tensor]:
    """Model ``index``'s state dict as :func:`write_weights` wrote it (either format)."""
    safe_path = directory / indexed(SAFE_MODEL_NAME, index, ".safetensors")
    what = f"weights of model {index}"
    if not safe_path.is_file():
        bin_path = directory / indexed(MODEL_NAME, index)
        if not bin_path.exists():
            raise _missing(f"{safe_path} (or {bin_path.name})", what)
        return read_state(bin_path, what)
    from safetensors import safe_open

    try:
        with safe_open(os.fspath(safe_path), framework="pt") as fh:
            state = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
            aliases = json.loads((fh.metadata() or {}).get("accelify_aliases", "{}"))
        for name, target in aliases.items():
            state[name] = state[target]
    except Exception as exc:  # noqa: BLE001 - safetensors' SafetensorError, json and key errors: all "damaged"
        raise unreadable(safe_path, what, exc) from exc
    return state


def rng_states() -> dict[str, Any]:
    """This process's Python, NumPy, torch (and CUDA) RNG states, in weights_only-loadable types."""
    version, internal, gauss = random.getstate()  # 625 ints: a tensor loads far faster than a pickled tuple
    states: dict[str, Any] = {
        "random_state": (version, torch.tensor(internal, dtype=torch.int64), gauss),
        "torch_manual_seed": torch.get_rng_state(),
    }
    try:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        states["numpy_random_seed"] = (kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss))
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`rng_states` returned."""
    version, internal, gauss = states["random_state"]
    random.setstate((version, tuple(internal.tolist()), gauss))
    torch.set_rng_state(states["torch_manual_seed"])
    if "numpy_random_seed" in states:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = states["numpy_random_seed"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, gauss))
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])
