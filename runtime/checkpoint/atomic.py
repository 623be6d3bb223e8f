"""Durable, atomic writes: single files, and folders written by several processes at once.

A reader never sees half of what was written: a file is written under a temporary name in its
folder and renamed over the target; a checkpoint folder is written as a hidden
``.<name>.tmp-<id>`` sibling by every process and renamed into place by one of them once all
finished. A killed process therefore always leaves the old or the new content complete.

Durability against an operating-system crash or power loss (``durable=True``, the default) needs
fsyncs. :func:`atomic_write` fsyncs before its rename. For checkpoint folders the fsyncs run on a
background thread after the rename (like asynchronous checkpointing elsewhere), so ``save_state``
costs about what ``torch.save`` costs: the previous copy of the folder, and whatever ``then``
deletes (older checkpoints), are removed only once the new folder is on disk, so a durable
checkpoint exists at every moment. The next save waits for the previous background job and
raises :class:`DurabilityError` on every process if it failed; the interpreter waits for it at exit.
``durable=False`` skips the fsyncs and deletes at once.

Folder protocol (:func:`stage_folder` / :func:`commit_folder`): rank 0 creates the temporary
folder and shares its name; every process writes and closes its files and reports success; if
all succeeded, rank 0 moves an existing ``<name>`` aside to ``.<name>.old-<id>`` and renames the
temporary folder to ``<name>``. A copy left aside by a process killed between the two renames is
found by :func:`readable_folder` and put back by the next :func:`stage_folder`. Nodes that do not
see rank 0's filesystem commit their own copy (their local main process).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

from ..errors import FolderError
from ..files import atomic_write, fsync_path  # noqa: F401  (atomic single files live in files.py)

# ---------------------------------------------------------------- processes


def world_size() -> int:
    """How many processes the default group has (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank in the default group (0 without one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    """Wait for every process of the default group; nothing to wait for with one process."""
    if world_size() > 1:
        dist.barrier()


def all_gather(value: Any) -> list[Any]:
    """Every process's ``value``, in rank order (``[value]`` with one process)."""
    if world_size() == 1:
        return [value]
    gathered: list[Any] = [None] * world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def all_ok(ok: bool) -> bool:
    """True when every process reports ``ok`` (one ``all_gather_object``; works on Gloo and NCCL)."""
    return all(all_gather(bool(ok)))


# ---------------------------------------------------------------- fsync


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make renames and new entries in folder ``path`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike[str]) -> None:
    """Flush every file under folder ``path``, then the folders themselves (deepest first).

    Files deleted meanwhile are skipped: what is gone needs no flushing.
    """
    folders = []
    for folder, _, names in os.walk(path):
        folders.append(folder)
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                fsync_path(os.path.join(folder, name))
    for folder in reversed(folders):
        fsync_dir(folder)


class DurabilityError(OSError):
    """A checkpoint written earlier could not be flushed to the disk (the error of the background job)."""


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_JOB: tuple[int, Future[None], str] | None = None  # (pid, job, what it makes durable)


def _pool() -> ThreadPoolExecutor:
    """One background thread per process (made again in a forked child, whose copy has no threads)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelify-fsync"))
        atexit.register(_report_at_exit)
    return _POOL[1]


def finish_in_background(job: Callable[[], None], what: str) -> None:
    """Run ``job`` (fsyncs, then deleting what the durable copy replaces) on this process's
    background thread, after waiting for the previous job (which re-raises its error)."""
    global _JOB
    wait_background()
    _JOB = (os.getpid(), _pool().submit(job), what)


def wait_background() -> None:
    """Block until this process's background job is done; raise :class:`DurabilityError` if it failed.

    The interpreter also waits for it at exit (a failure is then printed to stderr).
    """
    global _JOB
    job, _JOB = _JOB, None
    if job is None or job[0] != os.getpid():  # none, or the parent's (this is a forked child)
        return
    error = job[1].exception()
    if error is not None:
        raise DurabilityError(
            f"{job[2]} could not be flushed to the disk ({error}); it may be incomplete after an operating-system "
            "crash. Check the disk, then save again."
        ) from error


def _report_at_exit() -> None:
    try:
        wait_background()
    except DurabilityError as exc:
        print(f"accelify: {exc}", file=sys.stderr)


# ---------------------------------------------------------------- folders written by every process


@dataclass(frozen=True)
class StagedFolder:
    """A temporary folder every process writes into before :func:`commit_folder` renames it to ``target``."""

    target: Path
    tmp: Path
    committer: bool  # renames the folder into place: rank 0, or the local main process of a node without rank 0's files


def _siblings(target: Path, kind: str) -> list[Path]:
    """``.<name>.<kind>-*`` next to ``target``, oldest first."""
    prefix = f".{target.name}.{kind}-"
    try:
        entries = [e for e in os.scandir(target.parent) if e.name.startswith(prefix)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(e.path) for e in sorted(entries, key=lambda e: e.stat().st_mtime)]


def readable_folder(target: str | os.PathLike[str]) -> Path | None:
    """The folder to read for ``target``: itself, the copy a save killed mid-swap left aside, or None."""
    path = Path(target)
    if path.is_dir():
        return path
    backups = _siblings(path, "old")
    return backups[-1] if backups else None


def _recover(target: Path) -> None:
    """Before a save: put back a copy left aside by a killed save, drop stale temporary folders."""
    backups = _siblings(target, "old")
    if backups and not target.exists():
        os.rename(backups.pop(), target)
    for stale in [*backups, *_siblings(target, "tmp")]:
        shutil.rmtree(stale, ignore_errors=True)


def stage_folder(target: str | os.PathLike[str], local_rank: int | None = None) -> StagedFolder:
    """Every process must call it: create (on rank 0) and share the temporary folder for ``target``.

    With two processes, both get the same ``.<name>.tmp-<id>`` path; rank 0 is the committer.
    First every process waits for its previous background job; if that (or creating the folder)
    failed anywhere, every process raises.
    """
    target = Path(target)
    tmp_name, failure = "", None
    try:
        wait_background()
        if rank() == 0:
            _recover(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp_name = f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
            (target.parent / tmp_name).mkdir()
    except OSError as exc:  # tell the others instead of leaving them waiting
        failure = exc
    reports = all_gather((tmp_name, failure is not None))
    failed = [r for r, (_, bad) in enumerate(reports) if bad]
    if failure is not None:
        raise failure
    if failed:
        raise FolderError(f"Process(es) {', '.join(map(str, failed))} could not start saving {target}; see their error.")
    tmp = target.parent / reports[0][0]
    committer = rank() == 0
    if world_size() > 1:
        if not committer and (rank() if local_rank is None else local_rank) == 0 and not tmp.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)  # this node does not see rank 0's files
            tmp.mkdir(exist_ok=True)
            committer = True
        barrier()
    return StagedFolder(target, tmp, committer)


def commit_folder(staged: StagedFolder, ok: bool, durable: bool = True, then: Callable[[], Any] | None = None) -> bool:
    """Every process must call it after writing (``ok``: its files are complete and closed).

    If every process succeeded, the committer renames the folder into place and True is returned
    everywhere once it is done; otherwise the temporary folder is removed, ``target`` keeps its
    previous content, and False is returned everywhere. The rename is atomic against killed
    processes at once. With ``durable``, the committer's background thread then fsyncs the folder's
    files, the folder and its parent (power-loss safety), and only after that deletes the previous
    copy and runs ``then`` (e.g. pruning older checkpoints), so a durable copy always remains.
    Without ``durable`` both happen before returning.
    """
    if not all_ok(ok):  # every process finished writing (or failed): never leave one waiting
        if staged.committer:
            shutil.rmtree(staged.tmp, ignore_errors=True)
        return False
    if staged.committer:
        target, backup = staged.target, None
        if target.exists():
            backup = target.parent / f".{target.name}.old-{staged.tmp.name.rsplit('-', 1)[-1]}"
            os.rename(target, backup)
        os.rename(staged.tmp, target)

        def finish() -> None:
            if durable:
                fsync_tree(target)
                fsync_dir(target.parent)
            if backup is not None:
                shutil.rmtree(backup, ignore_errors=True)
            if then is not None:
                then()

        if durable:
            finish_in_background(finish, f"The checkpoint {target}")
        else:
            finish()
    barrier()
    return True
