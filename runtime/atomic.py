"""Durable, atomic writes: single files, and folders written by several processes at once.

A reader never sees half of what was written: a file is written under a temporary name in its
folder and renamed over the target; a checkpoint folder is written as a hidden
``.<name>.tmp-<id>`` sibling by every process and renamed into place by one of them once all
finished. ``durable=True`` (the default) also fsyncs the data before the rename and the parent
folder after it, so the result survives a power loss; ``durable=False`` keeps the rename
atomicity (a killed process still leaves the old or the new content) and skips the fsyncs.

Folder protocol (:func:`stage_folder` / :func:`commit_folder`): rank 0 creates the temporary
folder and broadcasts its name; every process writes its files, waits for them to reach the disk
and reports success; if all succeeded, rank 0 moves an existing ``<name>`` aside to
``.<name>.old-<id>``, renames the temporary folder to ``<name>``, fsyncs the parent and deletes the
old copy. A process killed at any point leaves either the old or the new folder complete; a copy
left aside is found by :func:`readable_folder` and put back by the next :func:`stage_folder`.
Nodes that do not see rank 0's filesystem commit their own copy (their local main process).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch.distributed as dist

# ---------------------------------------------------------------- processes


def _group_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank in the default group (0 without one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    """Wait for every process of the default group; nothing to wait for with one process."""
    if _group_size() > 1:
        dist.barrier()


def broadcast_str(value: str) -> str:
    """Rank 0's ``value`` on every process (itself with one process)."""
    if _group_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def all_ok(ok: bool) -> bool:
    """True when every process reports ``ok`` (one ``all_gather_object``; works on Gloo and NCCL)."""
    if _group_size() == 1:
        return ok
    flags: list[Any] = [None] * _group_size()
    dist.all_gather_object(flags, bool(ok))
    return all(flags)


# ---------------------------------------------------------------- fsync


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a written file's data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


_POOL: tuple[int, ThreadPoolExecutor] | None = None


def _pool() -> ThreadPoolExecutor:
    """One small fsync pool per process (made again in a forked child, whose copy has no threads)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=4, thread_name_prefix="accelify-fsync"))
    return _POOL[1]


class DurableFiles:
    """Files being made durable: each is fsynced on a pool thread as soon as it is added (while the
    caller serialises the next one); :meth:`wait` returns once all are on disk. With
    ``durable=False`` nothing is fsynced."""

    def __init__(self, durable: bool = True) -> None:
        self.durable = durable
        self._pending: list[Future[None]] = []

    def add(self, path: str | os.PathLike[str]) -> None:
        """Start fsyncing the written file ``path`` (nothing when not durable)."""
        if self.durable:
            self._pending.append(_pool().submit(fsync_path, path))

    def wait(self) -> None:
        """Block until every added file is on disk; re-raise the first fsync error."""
        pending, self._pending = self._pending, []
        errors = [f.exception() for f in pending]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def wait_quietly(self) -> None:
        """Wait for the fsyncs under way, ignoring their errors (the write already failed)."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.exception()


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], Any], durable: bool = True) -> None:
    """Call ``write(tmp_path)`` for a temporary file in ``path``'s folder, then rename it over ``path``.

    With ``durable``, the data is fsynced before the rename. On any error the temporary file is removed.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------- folders written by every process


class FolderError(OSError):
    """Process 0 could not prepare the temporary folder; the others learn it instead of waiting forever."""


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
    """
    target = Path(target)
    tmp_name, failure = "", None
    if rank() == 0:
        try:
            _recover(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp_name = f".{target.name}.tmp-{uuid.uuid4().hex[:12]}"
            (target.parent / tmp_name).mkdir()
        except OSError as exc:  # tell the others instead of leaving them waiting
            tmp_name, failure = "", exc
    tmp_name = broadcast_str(tmp_name)
    if not tmp_name:
        if failure is not None:
            raise failure
        raise FolderError(f"Process 0 could not create a temporary folder next to {target}; see its error.")
    tmp = target.parent / tmp_name
    committer = rank() == 0
    if _group_size() > 1:
        barrier()  # rank 0's folder exists before anyone looks for it
        if not committer and (rank() if local_rank is None else local_rank) == 0 and not tmp.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)  # this node does not see rank 0's files
            tmp.mkdir(exist_ok=True)
            committer = True
        barrier()
    return StagedFolder(target, tmp, committer)


def commit_folder(staged: StagedFolder, ok: bool, durable: bool = True) -> bool:
    """Every process must call it after writing (``ok``: its files are complete and durable).

    If every process succeeded, the committer renames the folder into place (durably with
    ``durable``) and True is returned everywhere once it is done; otherwise the temporary folder is
    removed, ``target`` keeps its previous content, and False is returned everywhere.
    """
    if not all_ok(ok):  # every process finished writing (or failed): never leave one waiting
        if staged.committer:
            shutil.rmtree(staged.tmp, ignore_errors=True)
        return False
    if staged.committer:
        # With durable, each file was fsynced (ext4/XFS/btrfs then also persist a new file's entry);
        # fsyncing the parent makes the rename itself durable.
        target, backup = staged.target, None
        if target.exists():
            backup = target.parent / f".{target.name}.old-{staged.tmp.name.rsplit('-', 1)[-1]}"
            os.rename(target, backup)
        os.rename(staged.tmp, target)
        if durable:
            fsync_dir(target.parent)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
    barrier()
    return True
