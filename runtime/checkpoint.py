"""save_state / load_state: atomic checkpoint folders, RNG states, safe (weights_only) loading.

Layout (Hugging Face Accelerate's file names): ``model.safetensors`` (``pytorch_model.bin`` without
safetensors), ``model_<i>.*`` for later models, ``optimizer.bin``, ``scheduler.bin``, ``scaler.pt``,
``dl_state_dict.bin``, ``custom_checkpoint_<i>.pkl`` and one ``random_states_<rank>.pkl`` per process.

Atomicity: every process writes into a hidden ``.<name>.tmp-<id>`` folder (the id is chosen by rank 0
and broadcast), fsyncs its files and meets the others at a barrier; then rank 0 moves an existing
``<name>`` aside to ``.<name>.old-<id>``, renames the temporary folder to ``<name>``, fsyncs the parent
and deletes the old copy. A process killed at any point leaves either the old or the new checkpoint
complete: a leftover ``.old-`` copy is found by ``load_state`` and put back by the next ``save_state``.
Nodes that do not share rank 0's filesystem commit their own copy (their local main process).

Loading uses ``torch.load(weights_only=True)``: nothing in a checkpoint can run code.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import shutil
import sys
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from .errors import AccelifyRuntimeError, ConfigurationError

SAFE_MODEL_NAME, MODEL_NAME, OPTIMIZER_NAME, SCHEDULER_NAME = "model", "pytorch_model", "optimizer", "scheduler"
SCALER_NAME, RNG_STATE_NAME, DATALOADER_NAME, CUSTOM_NAME = "scaler.pt", "random_states", "dl_state_dict", "custom_checkpoint"
_CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)$")


def _indexed(stem: str, index: int, ext: str = ".bin") -> str:
    """HF's numbering: ``optimizer.bin``, ``optimizer_1.bin``, ..."""
    return f"{stem}{ext}" if index == 0 else f"{stem}_{index}{ext}"


class CheckpointError(AccelifyRuntimeError):
    """A checkpoint cannot be written or read as asked; the message names the file and the fix."""


@dataclass
class ProjectConfiguration:
    """Where a project writes checkpoints and logs (Hugging Face's ``ProjectConfiguration``).

    ``automatic_checkpoint_naming=True`` makes ``save_state()`` write ``<project_dir>/checkpoints/
    checkpoint_<iteration>``, keep the newest ``total_limit`` of them, and ``load_state()`` resume the
    newest. ``logging_dir`` defaults to ``project_dir``. ``save_on_each_node`` writes the shared files
    on every node (for nodes without a shared filesystem).
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def __post_init__(self) -> None:
        if self.total_limit is not None and int(self.total_limit) < 1:
            raise ConfigurationError(f"total_limit={self.total_limit} must be >= 1 (or None to keep every checkpoint).")
        self.set_directories(self.project_dir)

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` too when it was not given."""
        self.project_dir = None if project_dir is None else os.fspath(project_dir)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir


# ---------------------------------------------------------------- processes
def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _broadcast_str(value: str) -> str:
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def _all_ok(ok: bool) -> bool:
    """True when every process reports ``ok`` (one all_gather_object; works on Gloo and NCCL)."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return ok
    flags: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(flags, bool(ok))
    return all(flags)


# ---------------------------------------------------------------- files
def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write(path: Path, obj: Any) -> Path:
    """torch.save ``obj`` to ``path`` (durability comes from :class:`_DurableFiles`)."""
    with open(path, "wb") as fh:
        torch.save(obj, fh)
    return path


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _DurableFiles:
    """Collects written files and fsyncs each on a worker thread while the next one is serialised."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelify-fsync")
        self._pending: list[Any] = []

    def add(self, path: Path) -> None:
        self._pending.append(self._pool.submit(_fsync_file, path))

    def wait(self) -> None:
        """Block until every added file is on disk; re-raise the first fsync error."""
        for future in self._pending:
            future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _safetensors_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("safetensors") is not None


def _write_weights(directory: Path, index: int, state: dict[str, torch.Tensor], safe: bool) -> Path:
    """Write one model's state dict; identical tied tensors are stored once and re-linked on load."""
    if not (safe and _safetensors_available()):
        return _write(directory / _indexed(MODEL_NAME, index), state)
    import json

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
        tensors[name] = tensor.clone() if shares or not tensor.is_contiguous() else tensor
    path = directory / _indexed(SAFE_MODEL_NAME, index, ".safetensors")
    save_file(tensors, os.fspath(path), metadata={"format": "pt", "accelify_aliases": json.dumps(aliases)})
    return path


def _read(path: Path, what: str, map_location: Any = "cpu") -> Any:
    """torch.load with ``weights_only=True``; an unsafe type becomes a CheckpointError saying how to allow it."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing ({what}); was this folder written by save_state with the same objects prepared?")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
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


def _read_weights(directory: Path, index: int) -> dict[str, torch.Tensor]:
    safe_path = directory / _indexed(SAFE_MODEL_NAME, index, ".safetensors")
    if not safe_path.is_file():
        return _read(directory / _indexed(MODEL_NAME, index), f"weights of model {index}")
    import json

    from safetensors import safe_open

    with safe_open(os.fspath(safe_path), framework="pt") as fh:
        state = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
        aliases = json.loads((fh.metadata() or {}).get("accelify_aliases", "{}"))
    for name, target in aliases.items():
        state[name] = state[target]
    return state


# ---------------------------------------------------------------- RNG
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


# ---------------------------------------------------------------- atomic folders
def readable_checkpoint(directory: str | os.PathLike[str]) -> Path:
    """The folder to read for ``directory``: itself, or the copy a save killed mid-swap left aside."""
    path = Path(directory)
    if path.is_dir():
        return path
    backups = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime) if path.parent.is_dir() else []
    if backups:
        return backups[-1]
    raise CheckpointError(f"No checkpoint folder at {path}; pass the folder save_state wrote (or its parent's checkpoint_<i>).")


def _recover(target: Path) -> None:
    """Rank 0, before a save: put back a copy left aside by a killed save, drop stale temporary folders."""
    if not target.parent.is_dir():
        return
    backups = sorted(target.parent.glob(f".{target.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if backups and not target.exists():
        os.rename(backups.pop(), target)
    for stale in [*backups, *target.parent.glob(f".{target.name}.tmp-*")]:
        shutil.rmtree(stale, ignore_errors=True)


def save_checkpoint(
    directory: str | os.PathLike[str],
    *,
    model_states: Sequence[dict[str, torch.Tensor]] = (),
    optimizer_states: Sequence[dict[str, Any]] = (),
    schedulers: Sequence[Any] = (),
    dataloaders: Sequence[Any] = (),
    scaler: Any = None,
    custom_objects: Sequence[Any] = (),
    step: int = 0,
    process_index: int | None = None,
    local_process_index: int | None = None,
    save_on_each_node: bool = False,
    safe_serialization: bool = True,
) -> Path:
    """Write a checkpoint folder atomically; every process must call it (it synchronises them).

    With two processes, both write ``random_states_<rank>.pkl``, rank 0 writes the shared files,
    and both return only after rank 0 renamed the finished folder to ``directory``.
    """
    target = Path(directory)
    rank = _rank() if process_index is None else process_index
    tmp_name, failure = "", None
    if _rank() == 0:
        try:
            _recover(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp_name = f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
            (target.parent / tmp_name).mkdir()
        except OSError as exc:  # tell the others instead of leaving them waiting
            tmp_name, failure = "", exc
    tmp_name = _broadcast_str(tmp_name)
    if not tmp_name:
        if failure is not None:
            raise failure
        raise CheckpointError(f"Process 0 could not create a temporary folder next to {target}; see its error.")
    tmp = target.parent / tmp_name
    _barrier()
    committer = _rank() == 0
    local_rank = rank if local_process_index is None else local_process_index
    if not committer and local_rank == 0 and not tmp.is_dir():  # this node does not see rank 0's files
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(exist_ok=True)
        committer = True
    _barrier()
    ok = False
    files = _DurableFiles()
    try:
        if _rank() == 0 or (committer and save_on_each_node):
            for i, state in enumerate(model_states):
                files.add(_write_weights(tmp, i, state, safe_serialization))
            for i, state in enumerate(optimizer_states):
                files.add(_write(tmp / _indexed(OPTIMIZER_NAME, i), state))
            for i, sched in enumerate(schedulers):
                files.add(_write(tmp / _indexed(SCHEDULER_NAME, i), sched.state_dict()))
            for i, loader in enumerate(dataloaders):
                if callable(getattr(loader, "state_dict", None)):
                    files.add(_write(tmp / _indexed(DATALOADER_NAME, i), loader.state_dict()))
            if scaler is not None:
                files.add(_write(tmp / SCALER_NAME, scaler.state_dict()))
            for i, obj in enumerate(custom_objects):
                files.add(_write(tmp / f"{CUSTOM_NAME}_{i}.pkl", obj.state_dict()))
        files.add(_write(tmp / f"{RNG_STATE_NAME}_{rank}.pkl", {"step": int(step), **rng_states()}))
        files.wait()
        ok = True
    finally:
        files.close()
        all_ok = _all_ok(ok)  # every process finished writing (or failed): never leave one waiting
        if not all_ok and committer:
            shutil.rmtree(tmp, ignore_errors=True)
    if not all_ok:
        raise CheckpointError(f"Another process failed while writing the checkpoint {target}; its previous content is kept.")
    if committer:
        # Each file was fsynced (ext4/XFS/btrfs then also persist a new file's entry); the rename is made
        # durable by fsyncing the parent below.
        backup = None
        if target.exists():
            backup = target.parent / f".{target.name}.old-{tmp_name.rsplit('-', 1)[-1]}"
            os.rename(target, backup)
        os.rename(tmp, target)
        _fsync_dir(target.parent)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    _barrier()
    return target


def load_checkpoint(
    directory: str | os.PathLike[str],
    *,
    model_loaders: Sequence[Callable[[dict[str, torch.Tensor]], Any]] = (),
    optimizer_loaders: Sequence[Callable[[dict[str, Any]], Any]] = (),
    schedulers: Sequence[Any] = (),
    dataloaders: Sequence[Any] = (),
    scaler: Any = None,
    custom_objects: Sequence[Any] = (),
    process_index: int | None = None,
    map_location: Any = "cpu",
) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote; returns ``{"step": int}``.

    ``model_loaders[i]`` / ``optimizer_loaders[i]`` receive model i's / optimizer i's state dict
    (so the caller decides how: plain ``load_state_dict``, or FSDP's full-state loading).
    With two processes, each restores its own ``random_states_<rank>.pkl``.
    """
    path = readable_checkpoint(directory)
    found = sorted(f for f in os.listdir(path) if re.fullmatch(rf"{CUSTOM_NAME}_\d+\.pkl", f))
    if len(found) != len(custom_objects):
        raise CheckpointError(
            f"{path} holds {len(found)} custom checkpoint(s) but {len(custom_objects)} object(s) are registered; "
            "register_for_checkpointing the same objects, in the same order, as when it was saved."
        )
    for i, loader in enumerate(model_loaders):
        loader(_read_weights(path, i))
    if scaler is not None:  # before the optimizers: FSDP2's optimizer loading may step a scaler-aware optimizer
        scaler.load_state_dict(_read(path / SCALER_NAME, "the GradScaler"))
    for i, loader in enumerate(optimizer_loaders):
        loader(_read(path / _indexed(OPTIMIZER_NAME, i), f"optimizer {i}", map_location))
    for i, sched in enumerate(schedulers):
        sched.load_state_dict(_read(path / _indexed(SCHEDULER_NAME, i), f"scheduler {i}"))
    for i, loader in enumerate(dataloaders):
        file = path / _indexed(DATALOADER_NAME, i)
        if callable(getattr(loader, "load_state_dict", None)) and file.is_file():
            loader.load_state_dict(_read(file, f"data loader {i}"))
    for i, obj in enumerate(custom_objects):
        obj.load_state_dict(_read(path / f"{CUSTOM_NAME}_{i}.pkl", f"registered object {i} ({type(obj).__name__})"))
    rank = _rank() if process_index is None else process_index
    rng_file = path / f"{RNG_STATE_NAME}_{rank}.pkl"
    if not rng_file.is_file() and any(path.glob(f"{RNG_STATE_NAME}_*.pkl")):
        warnings.warn(
            f"{path} has no {rng_file.name}: it was saved by fewer processes. Model, optimizer and data states "
            "were loaded; this process keeps its current random states, so the run is not bit-for-bit reproducible.",
            stacklevel=3,
        )
        rng_file = next(iter(sorted(path.glob(f"{RNG_STATE_NAME}_*.pkl"))))
        return {"step": int(_read(rng_file, "RNG states").get("step", 0))}
    states = _read(rng_file, f"RNG states of process {rank}")
    set_rng_states(states)
    return {"step": int(states.get("step", 0))}


# ---------------------------------------------------------------- automatic naming
def list_checkpoints(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(iteration, path)`` of every ``checkpoint_<i>`` folder under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), root / name) for name in os.listdir(root) if (m := _CHECKPOINT_RE.match(name))]
    return sorted(found)


def prune_checkpoints(root: str | os.PathLike[str], total_limit: int | None) -> list[Path]:
    """Delete all but the newest ``total_limit`` ``checkpoint_<i>`` folders; returns what was deleted."""
    if total_limit is None:
        return []
    found = [path for _, path in list_checkpoints(root)]
    doomed = found[: max(0, len(found) - total_limit)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def _fsdp_loaded() -> bool:
    """No model can be FSDP-sharded unless torch's FSDP was imported (importing it costs ~1 s: avoid it)."""
    return "torch.distributed.fsdp" in sys.modules


def check_checkpointable(objects: Sequence[Any]) -> None:
    """Raise ``ConfigurationError`` listing every object without ``state_dict``/``load_state_dict``."""
    bad = [
        f"  - item {i}: {type(obj).__name__} ({obj!r:.60})"
        for i, obj in enumerate(objects)
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None)))
    ]
    if bad:
        raise ConfigurationError(
            "register_for_checkpointing needs objects with state_dict() and load_state_dict(); these have not:\n"
            + "\n".join(bad)
            + "\nWrap them in a small class that defines both methods."
        )


class CheckpointMixin:
    """Checkpoint methods of ``Accelerator``: save_state, load_state, register_for_checkpointing.

    Reads ``self._models``, ``self._optimizers``, ``self._schedulers``, ``self._dataloaders``,
    ``self.scaler``, ``self.project_configuration``, ``self.get_state_dict`` and ``self.unwrap_model``;
    owns ``self._custom_objects`` (created on first use).
    """

    @property
    def _custom_objects(self) -> list[Any]:
        return self.__dict__.setdefault("_custom_objects_list", [])

    @_custom_objects.setter
    def _custom_objects(self, value: list[Any]) -> None:
        self.__dict__["_custom_objects_list"] = list(value)

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` (anything with ``state_dict``/``load_state_dict``) in save_state/load_state.

        With two processes, rank 0 writes ``custom_checkpoint_<i>.pkl``; both processes load it.
        """
        check_checkpointable(objects)
        self._custom_objects.extend(objects)

    def _project(self) -> ProjectConfiguration:
        config = getattr(self, "project_configuration", None)
        return config if config is not None else ProjectConfiguration()

    def _checkpoint_root(self) -> Path:
        config = self._project()
        if not config.project_dir:
            raise ConfigurationError(
                "automatic_checkpoint_naming needs a project folder; pass Accelerator(project_dir=...) "
                "or ProjectConfiguration(project_dir=...)."
            )
        return Path(config.project_dir).expanduser() / "checkpoints"

    def _owner_model(self, optimizer: Any) -> Any:
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        return next((m for m in getattr(self, "_models", []) if any(id(p) in params for p in m.parameters())), None)

    def _fsdp_owner(self, optimizer: Any) -> Any:
        """The FSDP-sharded model holding ``optimizer``'s parameters, or None."""
        if not _fsdp_loaded():
            return None
        model = self._owner_model(getattr(optimizer, "optimizer", optimizer))
        from . import fsdp

        return model if model is not None and fsdp.is_fsdp_module(model) else None

    def save_state(self, output_dir: str | os.PathLike[str] | None = None, safe_serialization: bool = True) -> Path:
        """Save models, optimizers, schedulers, scaler, data-loader positions, RNG states and registered objects.

        With ``ProjectConfiguration(automatic_checkpoint_naming=True)`` and no ``output_dir``, the folder is
        ``<project_dir>/checkpoints/checkpoint_<iteration>`` and only the newest ``total_limit`` are kept
        (an explicit ``output_dir`` is used as given; Hugging Face Accelerate would silently ignore it).
        With two processes, both must call it; both return once the folder is complete on disk.
        """
        config = self._project()
        automatic = config.automatic_checkpoint_naming and output_dir is None  # an explicit folder wins (HF ignores it)
        if automatic:
            root = self._checkpoint_root()
            target = root / f"checkpoint_{config.iteration}"
            if target.exists():
                raise CheckpointError(
                    f"{target} already exists; set accelerator.project_configuration.iteration to the next free number."
                )
        elif output_dir is None:
            raise ConfigurationError("save_state needs output_dir (or ProjectConfiguration(automatic_checkpoint_naming=True)).")
        else:
            target = Path(output_dir).expanduser()
        get_state_dict = getattr(self, "get_state_dict", lambda m: m.state_dict())
        model_states = [get_state_dict(m) for m in getattr(self, "_models", [])]
        optimizer_states = []
        for opt in getattr(self, "_optimizers", []):
            owner = self._fsdp_owner(opt)
            if owner is None:
                optimizer_states.append(opt.state_dict())
            else:
                from . import fsdp

                optimizer_states.append(fsdp.full_optimizer_state_dict(owner, getattr(opt, "optimizer", opt)))
        state = getattr(self, "state", None)
        path = save_checkpoint(
            target,
            model_states=model_states,
            optimizer_states=optimizer_states,
            schedulers=list(getattr(self, "_schedulers", [])),
            dataloaders=list(getattr(self, "_dataloaders", [])),
            scaler=getattr(self, "scaler", None),
            custom_objects=self._custom_objects,
            step=int(getattr(self, "step", 0)),
            process_index=getattr(state, "process_index", None),
            local_process_index=getattr(state, "local_process_index", None),
            save_on_each_node=config.save_on_each_node,
            safe_serialization=safe_serialization,
        )
        if automatic:
            if _rank() == 0:
                prune_checkpoints(root, config.total_limit)
            _barrier()
            config.iteration += 1
        return path

    def load_state(
        self, input_dir: str | os.PathLike[str] | None = None, load_kwargs: dict[str, Any] | None = None, **load_model_func_kwargs: Any
    ) -> None:
        """Restore what ``save_state`` wrote; with no folder and automatic naming, the newest checkpoint.

        ``strict=False`` relaxes model loading; ``map_location="on_device"`` loads optimizer state
        straight onto ``accelerator.device``. With two processes, each restores its own RNG states.
        """
        config = self._project()
        if input_dir is not None:
            path = readable_checkpoint(Path(input_dir).expanduser())
        elif config.automatic_checkpoint_naming:
            found = list_checkpoints(self._checkpoint_root())
            if not found:
                raise CheckpointError(f"No checkpoint_<i> folder under {self._checkpoint_root()} to resume from.")
            index, path = found[-1]
            config.iteration = max(config.iteration, index + 1)
        else:
            raise ConfigurationError("load_state needs input_dir (or ProjectConfiguration(automatic_checkpoint_naming=True)).")
        strict = bool(load_model_func_kwargs.pop("strict", True))
        map_location = load_model_func_kwargs.pop("map_location", None) or (load_kwargs or {}).get("map_location")
        if load_model_func_kwargs:
            raise TypeError(f"load_state got unexpected keyword(s) {', '.join(load_model_func_kwargs)}; accepted: strict, map_location.")
        if map_location == "on_device":
            map_location = self.state.device  # type: ignore[attr-defined]
        unwrap = getattr(self, "unwrap_model", lambda m: m)

        def model_loader(model: Any) -> Callable[[dict[str, torch.Tensor]], Any]:
            if _fsdp_loaded():
                from . import fsdp

                if fsdp.is_fsdp_module(model):
                    return lambda sd: fsdp.load_full_state_dict(model, sd, strict=strict)
            return lambda sd: unwrap(model).load_state_dict(sd, strict=strict)

        def optimizer_loader(opt: Any) -> Callable[[dict[str, Any]], Any]:
            owner = self._fsdp_owner(opt)
            if owner is None:
                return opt.load_state_dict
            from . import fsdp

            return lambda sd: fsdp.load_full_optimizer_state_dict(owner, getattr(opt, "optimizer", opt), sd)

        result = load_checkpoint(
            path,
            model_loaders=[model_loader(m) for m in getattr(self, "_models", [])],
            optimizer_loaders=[optimizer_loader(o) for o in getattr(self, "_optimizers", [])],
            schedulers=list(getattr(self, "_schedulers", [])),
            dataloaders=list(getattr(self, "_dataloaders", [])),
            scaler=getattr(self, "scaler", None),
            custom_objects=self._custom_objects,
            process_index=getattr(getattr(self, "state", None), "process_index", None),
            map_location=map_location or "cpu",
        )
        if hasattr(self, "step"):
            self.step = result["step"]
