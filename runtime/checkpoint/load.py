"""Reading a checkpoint back, all or nothing: every file is read and checked before anything is restored.

:func:`load_checkpoint` works in two phases. First it reads every file this process needs (weights,
optimizer, scheduler, scaler, data-loader and registered-object states, its own RNG states) and
checks that each fits what it will restore (model keys and shapes, optimizer parameter groups,
the keys a scaler or data loader needs). With several processes they then agree: if any process
failed, every process raises (the one that failed with its own error, the others with a
:class:`~.errors.CheckpointPeerError` naming it), so none trains on a checkpoint another refused.
Only then is anything restored: registered objects first (their ``load_state_dict`` is user code,
the one step that can still fail), then models, scaler, optimizers, schedulers, data loaders and
RNG states. An error names the file, the checkpoint folder, and the checkpoint to load instead.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from . import atomic
from . import layout as files
from .layout import (
    CUSTOM_NAME,
    DATALOADER_NAME,
    OPTIMIZER_NAME,
    RNG_STATE_NAME,
    SCALER_NAME,
    SCHEDULER_NAME,
    indexed,
)
from ..debug import debug_checkpoint
from ..errors import CheckpointError, CheckpointPeerError

CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)$")
Check = Callable[[Any], "str | None"]  # a problem with a state about to be restored, or None
UNCHANGED = "the models, optimizers, schedulers, registered objects and random states are unchanged"


def readable_checkpoint(directory: str | os.PathLike[str]) -> Path:
    """The folder to read for ``directory``: itself, or the copy a save killed mid-swap left aside."""
    path = atomic.readable_folder(directory)
    if path is None:
        raise CheckpointError(
            f"No checkpoint folder at {directory}; pass the folder save_state wrote (or its parent's checkpoint_<i>)."
        )
    return path


def list_checkpoints(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(iteration, path)`` of every ``checkpoint_<i>`` folder under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), root / name) for name in os.listdir(root) if (m := CHECKPOINT_RE.match(name))]
    return sorted(found)


def earlier_checkpoints(path: Path) -> list[Path]:
    """The checkpoints to fall back on from ``path``, newest first: ``checkpoint_<j>`` with a lower ``j``
    for automatically named ones, else the checkpoint folders next to it that are not newer."""
    match = CHECKPOINT_RE.match(path.name)
    if match:
        return [p for i, p in reversed(list_checkpoints(path.parent)) if i < int(match.group(1))]
    try:
        mtime = path.stat().st_mtime
        siblings = [p for p in path.parent.iterdir() if p.is_dir() and p.name != path.name
                    and not p.name.startswith(".") and any(p.glob(f"{RNG_STATE_NAME}_*.pkl"))]
        return sorted((p for p in siblings if p.stat().st_mtime <= mtime), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []


def _advice(path: Path) -> str:
    earlier = earlier_checkpoints(path)
    head = f"Checkpoint folder: {path}. Nothing was loaded: {UNCHANGED}."
    if not earlier:
        return f"{head}\nNo earlier checkpoint was found next to it (in {path.parent}); save a new one when you can."
    older = f" (older ones: {', '.join(p.name for p in earlier[1:4])})" if len(earlier) > 1 else ""
    return f"{head}\nLoad the previous checkpoint instead: accelerator.load_state({str(earlier[0])!r}){older}."


def check_model_state(module: torch.nn.Module, state: Mapping[str, Any], strict: bool = True) -> str | None:
    """What ``module.load_state_dict(state, strict)`` would refuse (keys, shapes), before it changes anything."""
    expected = module.state_dict()
    problems = []
    if strict:
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        if missing:
            problems.append(f"missing key(s) {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            problems.append(f"unexpected key(s) {', '.join(unexpected[:5])}{' ...' if len(unexpected) > 5 else ''}")
    shapes = [f"{k} is {list(state[k].shape)} in the checkpoint, {list(v.shape)} in the model"
              for k, v in expected.items()
              if k in state and isinstance(v, torch.Tensor) and isinstance(state[k], torch.Tensor)
              and not torch.nn.parameter.is_lazy(v) and state[k].shape != v.shape]
    problems += shapes[:5]
    return "; ".join(problems) or None


def check_optimizer_state(optimizer: Any, state: Any) -> str | None:
    """What ``optimizer.load_state_dict(state)`` would refuse (its parameter groups), before it changes anything."""
    if not (isinstance(state, Mapping) and "state" in state and isinstance(state.get("param_groups"), list)):
        return "it is not an optimizer state (no 'state' and 'param_groups')"
    saved = [len(g.get("params", ())) for g in state["param_groups"]]
    current = [len(g["params"]) for g in optimizer.param_groups]
    if saved != current:
        return f"its parameter groups hold {saved} parameters, the optimizer's {current}"
    return None


def _check_mapping(state: Any, required: Sequence[str] = ()) -> str | None:
    if not isinstance(state, Mapping):
        return f"it holds a {type(state).__name__}, not a state dict"
    missing = [k for k in required if k not in state]
    return f"it lacks {', '.join(missing)}" if missing else None


def _check_rng(states: Any) -> str | None:
    problem = _check_mapping(states, ("random_state", "torch_manual_seed"))
    if problem is None and not isinstance(states["torch_manual_seed"], torch.Tensor):
        problem = "its torch RNG state is not a tensor"
    return problem


def _read(path: Path, name: str, what: str, check: Check | None = None, map_location: Any = "cpu") -> Any:
    state = files.read_state(path / name, what, map_location)
    problem = check(state) if check is not None else None
    if problem:
        raise CheckpointError(f"{path / name} ({what}) does not fit: {problem}.")
    return state


@dataclass(frozen=True)
class _Targets:
    """What one load restores (the keyword arguments of :func:`load_checkpoint`)."""

    model_loaders: Sequence[Callable[[Any], Any]]
    optimizer_loaders: Sequence[Callable[[Any], Any]]
    schedulers: Sequence[Any]
    dataloaders: Sequence[Any]
    scaler: Any
    custom_objects: Sequence[Any]
    map_location: Any
    model_checks: Sequence[Check | None]
    optimizer_checks: Sequence[Check | None]


def _nth(checks: Sequence[Check | None], i: int) -> Check | None:
    return checks[i] if i < len(checks) else None


def _plan(path: Path, rank: int, t: _Targets) -> tuple[list[tuple[str, Callable[[Any], Any], Any]], int, str | None]:
    """Read and check every file: ``([(what, restore, state), ...], step, warning)``; raises CheckpointError."""
    names = os.listdir(path)
    found = [f for f in names if re.fullmatch(rf"{CUSTOM_NAME}_\d+\.pkl", f)]
    if len(found) != len(t.custom_objects):
        absent = [files.custom_file_name(i) for i in range(len(t.custom_objects)) if files.custom_file_name(i) not in names]
        missing = f" ({', '.join(absent)} missing)" if absent else ""
        raise CheckpointError(
            f"{path} holds {len(found)} custom checkpoint(s){missing} but {len(t.custom_objects)} object(s) are "
            "registered; register_for_checkpointing the same objects, in the same order, as when it was saved."
        )
    steps: list[tuple[str, Callable[[Any], Any], Any]] = []
    for i, obj in enumerate(t.custom_objects):  # first: their load_state_dict is user code that may still raise
        what = f"registered object {i} ({type(obj).__name__})"
        steps.append((what, obj.load_state_dict, _read(path, files.custom_file_name(i), what)))
    for i, loader in enumerate(t.model_loaders):
        state = files.read_weights(path, i)
        check = _nth(t.model_checks, i)
        problem = check(state) if check is not None else None
        if problem:
            raise CheckpointError(f"The weights of model {i} in {path} do not fit the model: {problem}. Was it saved "
                                  "from the same model? (load_state(..., strict=False) ignores missing and unexpected keys.)")
        steps.append((f"model {i}", loader, state))
    if t.scaler is not None:  # before the optimizers: FSDP2's optimizer loading may step a scaler-aware optimizer
        required = list(t.scaler.state_dict()) if t.scaler.is_enabled() else []
        steps.append(("the GradScaler", t.scaler.load_state_dict,
                      _read(path, SCALER_NAME, "the GradScaler", lambda s: _check_mapping(s, required))))
    for i, loader in enumerate(t.optimizer_loaders):
        state = _read(path, indexed(OPTIMIZER_NAME, i), f"optimizer {i}", _nth(t.optimizer_checks, i), t.map_location)
        steps.append((f"optimizer {i}", loader, state))
    for i, sched in enumerate(t.schedulers):
        state = _read(path, indexed(SCHEDULER_NAME, i), f"scheduler {i}", _check_mapping)
        steps.append((f"scheduler {i}", sched.load_state_dict, state))
    for i, loader in enumerate(t.dataloaders):
        name = indexed(DATALOADER_NAME, i)
        if callable(getattr(loader, "load_state_dict", None)) and name in names:
            current = loader.state_dict() if callable(getattr(loader, "state_dict", None)) else {}
            required = ["epoch"] if "epoch" in current else []
            state = _read(path, name, f"data loader {i}", lambda s, r=required: _check_mapping(s, r))
            steps.append((f"data loader {i}", loader.load_state_dict, state))
    rng_name = files.rng_file_name(rank)
    saved_rng = sorted(f for f in names if re.fullmatch(rf"{RNG_STATE_NAME}_\d+\.pkl", f))
    saved_by = {int(f[len(RNG_STATE_NAME) + 1:-4]) for f in saved_rng}
    if rng_name not in names and saved_by and max(saved_by) < rank:  # fewer processes saved it, or damage
        other = _read(path, saved_rng[0], "RNG states", _check_mapping)
        if int(other.get("num_processes", 0)) > rank:  # it was written: the file is missing, not the process
            files.read_state(path / rng_name, f"RNG states of process {rank}")
        step = int(other.get("step", 0))
        return steps, step, (
            f"{path} has no {rng_name}: it was saved by fewer processes. Model, optimizer and data states "
            "were loaded; this process keeps its current random states, so the run is not bit-for-bit reproducible."
        )
    states = _read(path, rng_name, f"RNG states of process {rank}", _check_rng)
    steps.append((f"RNG states of process {rank}", files.set_rng_states, states))
    return steps, int(states.get("step", 0)), None


def _agree(error: BaseException | None, directory: Any) -> None:
    """Every process learns whether every other read its files; any failure raises everywhere."""
    reports = atomic.all_gather(None if error is None else str(error).splitlines()[0])
    if error is not None:
        raise error
    failed = [(r, line) for r, line in enumerate(reports) if line is not None]
    if failed:
        rank, line = failed[0]
        raise CheckpointPeerError(
            f"Process {rank} could not load the checkpoint {directory}: {line}\n"
            f"Nothing was loaded on any process: {UNCHANGED}. See process {rank}'s error for what to do."
        )


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
    model_checks: Sequence[Check | None] = (),
    optimizer_checks: Sequence[Check | None] = (),
) -> dict[str, Any]:
    """Restore what :func:`~.checkpoint.save_checkpoint` wrote, all or nothing; returns ``{"step": int}``.

    ``model_loaders[i]`` / ``optimizer_loaders[i]`` receive model i's / optimizer i's state dict (so
    the caller decides how: plain ``load_state_dict``, or FSDP's full-state loading);
    ``model_checks[i]`` / ``optimizer_checks[i]`` say what would not fit (:func:`check_model_state`).
    With two processes both must call it; each restores its own ``random_states_<rank>.pkl``, and
    if process 1's file is damaged, both raise and neither changes anything.
    """
    rank = atomic.rank() if process_index is None else process_index
    targets = _Targets(model_loaders, optimizer_loaders, schedulers, dataloaders, scaler, custom_objects,
                       map_location, model_checks, optimizer_checks)
    debug_checkpoint("Accelerator.load_state")
    steps: list[tuple[str, Callable[[Any], Any], Any]] = []
    step, note, error, path = 0, None, None, None
    try:
        path = readable_checkpoint(directory)
        steps, step, note = _plan(path, rank, targets)
    except CheckpointError as exc:
        error = CheckpointError(f"{exc}\n{_advice(path)}") if path is not None else exc
        error.__cause__ = exc.__cause__
    except Exception as exc:  # noqa: BLE001 - whatever it is, the other processes must not wait for this one
        error = exc
    _agree(error, directory)
    for i, (what, restore, state) in enumerate(steps):
        try:
            restore(state)
        except Exception as exc:
            if i >= len(custom_objects):  # every state was checked: not expected
                raise
            before = f"; registered objects 0 to {i - 1} were restored" if i else ""
            raise CheckpointError(
                f"{what} raised in load_state_dict with its state from {path} ({type(exc).__name__}: {exc}). "
                f"The models, optimizers, schedulers and random states are unchanged{before}."
            ) from exc
    if note is not None:
        warnings.warn(note, stacklevel=3)
    return {"step": step}
