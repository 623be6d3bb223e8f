"""Replacing one file atomically, the way a plain ``open(path, "w")`` would have left it.

A reader never sees half a file: the data goes to a temporary file in the target's folder, which
is then renamed over the target. Two things a bare ``mkstemp`` + rename gets wrong are handled here:

- the mode: ``mkstemp`` creates files readable by their owner only (0600); a new file gets the mode
  ``open()`` would give it (0666 minus the umask, 0644 typically), an existing file keeps its mode;
- symbolic links: renaming over a link would replace the link by a file; the link's target is
  rewritten instead, and the link stays.

This module imports nothing beyond the standard library: the conversion tool uses it too, and
the tool may run where torch is not installed.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import Any, Callable

__all__ = ["atomic_write", "fsync_path", "new_file_mode", "write_destination"]


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a written file's data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows (``os.umask`` must set one)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def new_file_mode() -> int:
    """The permission bits ``open(path, "w")`` gives a new file: ``0o666`` minus the umask."""
    return 0o666 & ~_umask()


def write_destination(path: str | os.PathLike[str]) -> str:
    """The file a write to ``path`` really changes: ``path`` itself, or the file its symbolic link(s) name."""
    name = os.fspath(path)
    return os.path.realpath(name) if os.path.islink(name) else name


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], Any], *, durable: bool = True) -> None:
    """Call ``write(tmp_path)`` for a temporary file beside ``path``, then rename it over ``path``.

    The result has ``path``'s previous mode, or a new file's usual mode; a symbolic link at ``path``
    keeps pointing where it did and its target gets the data. With ``durable`` the data is fsynced
    before the rename. On any error (or Ctrl-C) the temporary file is removed and ``path`` is untouched.
    """
    target = write_destination(path)
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = new_file_mode()
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        os.close(fd)
        write(tmp)
        os.chmod(tmp, mode)  # after writing: some writers (safetensors) replace the file with a 0600 one
        if durable:
            fsync_path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
