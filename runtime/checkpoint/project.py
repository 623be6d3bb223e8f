"""save_state / load_state: what a checkpoint holds, and automatic naming.

``Accelerator.save_state``/``load_state``/``register_for_checkpointing`` delegate to :func:`save_state`,
:func:`load_state` and :func:`register_for_checkpointing`, passing what they need explicitly: the
:class:`~.prepared.PreparedObjects` it owns, its ``ProjectConfiguration``, scaler, step and rank.

Which files a checkpoint folder holds and how each is (de)serialised: :mod:`.layout`
(Hugging Face Accelerate's layout; loading is ``torch.load(weights_only=True)``, nothing in a
checkpoint can run code). How the folder is written atomically by every process: :mod:`.atomic`
(a process killed at any point leaves the previous or the new checkpoint complete).

Durability: ``save_state`` returns once every process has written and closed its files and the
folder is renamed into place (a killed *process* always leaves a complete checkpoint). By default
a background thread then fsyncs the new folder, and only after that deletes the copy it replaced
and the checkpoints ``total_limit`` prunes, so one checkpoint that survives a power loss always
exists; the next ``save_state`` and the end of the process wait for it (see
:mod:`.atomic`). ``ProjectConfiguration(durable=False)`` or ``ACCELIFY_DURABLE_CHECKPOINTS=0`` skip
the fsyncs (for filesystems where fsync is very slow).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from . import atomic
from . import layout as files
from .layout import (  # noqa: F401  (set_rng_states, load_checkpoint: this module's documented names)
    DATALOADER_NAME,
    OPTIMIZER_NAME,
    SCALER_NAME,
    SCHEDULER_NAME,
    indexed,
    rng_states,
    set_rng_states,
)
from .load import (
    check_model_state,
    check_optimizer_state,
    list_checkpoints,
    load_checkpoint,
    readable_checkpoint,
)
from ..errors import CheckpointError, CheckpointPeerError, ConfigurationError
from ..prepared import PreparedObjects
from ..launch_settings import DURABLE_ENV, durable_checkpoints  # noqa: F401  (DURABLE_ENV: the switch's name, for callers)


@dataclass
class ProjectConfiguration:
    """Where a project writes checkpoints and logs (Hugging Face's ``ProjectConfiguration``).

    ``automatic_checkpoint_naming=True`` makes ``save_state()`` write ``<project_dir>/checkpoints/
    checkpoint_<iteration>``, keep the newest ``total_limit`` of them, and ``load_state()`` resume the
    newest. ``logging_dir`` defaults to ``project_dir``. ``save_on_each_node`` writes the shared files
    on every node (for nodes without a shared filesystem). ``durable`` (accelify only; default from
    ``ACCELIFY_DURABLE_CHECKPOINTS``, else True) fsyncs checkpoints in the background before the
    previous copy and pruned checkpoints are deleted.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False
    durable: bool | None = None

    def __post_init__(self) -> None:
        if self.total_limit is not None and int(self.total_limit) < 1:
            raise ConfigurationError(f"total_limit={self.total_limit} must be >= 1 (or None to keep every checkpoint).")
        if self.durable is None:
            self.durable = durable_checkpoints()
        self.set_directories(self.project_dir)

    def set_directories(self, project_dir: str | os.PathLike[str] | None = None) -> None:
        """Set ``project_dir``, and ``logging_dir`` too when it was not given."""
        self.project_dir = None if project_dir is None else os.fspath(project_dir)
        if self.logging_dir is None:
            self.logging_dir = self.project_dir


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
    durable: bool = True,
    then: Callable[[], Any] | None = None,
) -> Path:
    """Write a checkpoint folder atomically; every process must call it (it synchronises them).

    With two processes, both write ``random_states_<rank>.pkl``, rank 0 writes the shared files,
    and both return only after rank 0 renamed the finished folder to ``directory``. ``durable``
    fsyncs it in the background; ``then`` runs on rank 0 after that (see :func:`.atomic.commit_folder`).
    """
    target = Path(directory)
    rank = atomic.rank() if process_index is None else process_index
    staged = atomic.stage_folder(target, local_process_index)
    tmp, ok = staged.tmp, False
    try:
        if atomic.rank() == 0 or (staged.committer and save_on_each_node):
            for i, state in enumerate(model_states):
                files.write_weights(tmp, i, state, safe_serialization)
            for i, state in enumerate(optimizer_states):
                files.write_state(tmp / indexed(OPTIMIZER_NAME, i), state)
            for i, sched in enumerate(schedulers):
                files.write_state(tmp / indexed(SCHEDULER_NAME, i), sched.state_dict())
            for i, loader in enumerate(dataloaders):
                if callable(getattr(loader, "state_dict", None)):
                    files.write_state(tmp / indexed(DATALOADER_NAME, i), loader.state_dict())
            if scaler is not None:
                files.write_state(tmp / SCALER_NAME, scaler.state_dict())
            for i, obj in enumerate(custom_objects):
                files.write_state(tmp / files.custom_file_name(i), obj.state_dict())
        # how many processes saved it: a missing random_states_<rank>.pkl is then damage, not a smaller run
        files.write_state(tmp / files.rng_file_name(rank), {"step": int(step), "num_processes": atomic.world_size(),
                                                            **rng_states()})
        ok = True
    finally:
        committed = atomic.commit_folder(staged, ok, durable, then if atomic.rank() == 0 else None)
    if not committed:
        raise CheckpointPeerError(
            f"Another process failed while writing the checkpoint {target} (see its error); its previous content is kept."
        )
    return target


# ---------------------------------------------------------------- automatic naming
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


def register_for_checkpointing(prepared: PreparedObjects, objects: Sequence[Any]) -> None:
    """Add ``objects`` (anything with ``state_dict``/``load_state_dict``) to what checkpoints save and load.

    With two processes, rank 0 writes ``custom_checkpoint_<i>.pkl``; both processes load it.
    """
    check_checkpointable(objects)
    prepared.custom_objects.extend(objects)


def _checkpoint_root(config: ProjectConfiguration) -> Path:
    if not config.project_dir:
        raise ConfigurationError(
            "automatic_checkpoint_naming needs a project folder; pass Accelerator(project_dir=...) "
            "or ProjectConfiguration(project_dir=...)."
        )
    return Path(config.project_dir).expanduser() / "checkpoints"


def _fsdp_owner(prepared: PreparedObjects, optimizer: Any) -> Any:
    """The FSDP-sharded model holding ``optimizer``'s parameters, or None."""
    if not _fsdp_loaded():
        return None
    model = prepared.model_of(getattr(optimizer, "optimizer", optimizer))
    from .. import fsdp

    return model if model is not None and fsdp.is_fsdp_module(model) else None


def save_state(
    prepared: PreparedObjects,
    config: ProjectConfiguration,
    output_dir: str | os.PathLike[str] | None = None,
    *,
    safe_serialization: bool = True,
    scaler: Any = None,
    step: int = 0,
    process_index: int | None = None,
    local_process_index: int | None = None,
    model_state: Callable[[Any], dict[str, torch.Tensor]] = lambda model: model.state_dict(),
) -> Path:
    """Save ``prepared``'s models, optimizers, schedulers, data-loader positions and registered objects,
    the scaler, the RNG states and ``step``, to ``output_dir`` or the next automatically named folder.

    With ``config.automatic_checkpoint_naming`` and no ``output_dir``, the folder is
    ``<project_dir>/checkpoints/checkpoint_<iteration>`` and only the newest ``total_limit`` are kept
    (an explicit ``output_dir`` is used as given; Hugging Face Accelerate would silently ignore it).
    ``model_state(model)`` gives a model's full state dict (``Accelerator.get_state_dict``: FSDP gathers).
    With two processes, both must call it; both return once the folder is complete on disk.
    """
    automatic = config.automatic_checkpoint_naming and output_dir is None  # an explicit folder wins (HF ignores it)
    if automatic:
        root = _checkpoint_root(config)
        target = root / f"checkpoint_{config.iteration}"
        if target.exists():
            raise CheckpointError(
                f"{target} already exists; set accelerator.project_configuration.iteration to the next free number."
            )
    elif output_dir is None:
        raise ConfigurationError("save_state needs output_dir (or ProjectConfiguration(automatic_checkpoint_naming=True)).")
    else:
        target = Path(output_dir).expanduser()
    model_states = [model_state(m) for m in prepared.models]
    optimizer_states = []
    for opt in prepared.optimizers:
        owner = _fsdp_owner(prepared, opt)
        if owner is None:
            optimizer_states.append(opt.state_dict())
        else:
            from .. import fsdp

            optimizer_states.append(fsdp.full_optimizer_state_dict(owner, getattr(opt, "optimizer", opt)))
    path = save_checkpoint(
        target,
        model_states=model_states,
        optimizer_states=optimizer_states,
        schedulers=list(prepared.schedulers),
        dataloaders=list(prepared.dataloaders),
        scaler=scaler,
        custom_objects=prepared.custom_objects,
        step=int(step),
        process_index=process_index,
        local_process_index=local_process_index,
        save_on_each_node=config.save_on_each_node,
        safe_serialization=safe_serialization,
        durable=config.durable is not False,
        then=(lambda: prune_checkpoints(root, config.total_limit)) if automatic else None,
    )
    if automatic:
        config.iteration += 1
    return path


def load_state(
    prepared: PreparedObjects,
    config: ProjectConfiguration,
    input_dir: str | os.PathLike[str] | None = None,
    load_kwargs: dict[str, Any] | None = None,
    *,
    scaler: Any = None,
    device: Any = None,
    process_index: int | None = None,
    unwrap: Callable[[Any], Any] = lambda model: model,
    **load_model_func_kwargs: Any,
) -> int:
    """Restore what :func:`save_state` wrote into ``prepared``'s objects and ``scaler``; return the saved step.

    With no folder and automatic naming, the newest checkpoint. ``strict=False`` relaxes model
    loading; ``map_location="on_device"`` loads optimizer state straight onto ``device``. All or
    nothing (see :mod:`.load`). With two processes, each restores its own RNG states.
    """
    if input_dir is not None:
        path = readable_checkpoint(Path(input_dir).expanduser())
    elif config.automatic_checkpoint_naming:
        found = list_checkpoints(_checkpoint_root(config))
        if not found:
            raise CheckpointError(f"No checkpoint_<i> folder under {_checkpoint_root(config)} to resume from.")
        index, path = found[-1]
        config.iteration = max(config.iteration, index + 1)
    else:
        raise ConfigurationError("load_state needs input_dir (or ProjectConfiguration(automatic_checkpoint_naming=True)).")
    strict = bool(load_model_func_kwargs.pop("strict", True))
    map_location = load_model_func_kwargs.pop("map_location", None) or (load_kwargs or {}).get("map_location")
    if load_model_func_kwargs:
        raise TypeError(f"load_state got unexpected keyword(s) {', '.join(load_model_func_kwargs)}; accepted: strict, map_location.")
    if map_location == "on_device":
        map_location = device

    def model_loader(model: Any) -> Callable[[dict[str, torch.Tensor]], Any]:
        if _fsdp_loaded():
            from .. import fsdp

            if fsdp.is_fsdp_module(model):
                return lambda sd: fsdp.load_full_state_dict(model, sd, strict=strict)
        return lambda sd: unwrap(model).load_state_dict(sd, strict=strict)

    def optimizer_loader(opt: Any) -> Callable[[dict[str, Any]], Any]:
        owner = _fsdp_owner(prepared, opt)
        if owner is None:
            return opt.load_state_dict
        from .. import fsdp

        return lambda sd: fsdp.load_full_optimizer_state_dict(owner, getattr(opt, "optimizer", opt), sd)

    models, optimizers = list(prepared.models), list(prepared.optimizers)
    result = load_checkpoint(
        path,
        model_loaders=[model_loader(m) for m in models],
        optimizer_loaders=[optimizer_loader(o) for o in optimizers],
        model_checks=[lambda sd, m=m: check_model_state(unwrap(m), sd, strict) for m in models],
        optimizer_checks=[None if _fsdp_owner(prepared, o) is not None else (lambda sd, o=o: check_optimizer_state(o, sd))
                          for o in optimizers],
        schedulers=list(prepared.schedulers),
        dataloaders=list(prepared.dataloaders),
        scaler=scaler,
        custom_objects=prepared.custom_objects,
        process_index=process_index,
        map_location=map_location or "cpu",
    )
    return int(result["step"])
