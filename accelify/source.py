"""Reading Python sources with the right encoding, and writing them back atomically."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path

from accelify.errors import OutputError, SourceError, TooLargeError
from accelify.runtime.files import atomic_write, fsync_path, new_file_mode, write_destination

MAX_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    """The text of a file and how to encode it back (``utf-8-sig`` keeps a byte-order mark)."""

    text: str
    encoding: str


def decode(data: bytes, path: str = "<bytes>") -> Source:
    """Decode ``data`` per PEP 263 (coding cookie, BOM, UTF-8 default); refuse binary data."""
    if b"\x00" in data[:8192]:
        raise SourceError(path, "looks like a binary file (it contains NUL bytes)", "pass Python source files only")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as error:
        raise SourceError(path, f"bad encoding declaration: {error.msg}", "fix the `# -*- coding: ... -*-` line") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as error:
        raise SourceError(
            path, f"cannot be decoded as {encoding}: {error}", "save it as UTF-8 or declare its encoding (PEP 263)"
        ) from None
    return Source(text, encoding)


def read_source(path: str | os.PathLike[str]) -> Source:
    """Read and decode a Python file."""
    name = os.fspath(path)
    file = Path(name)
    if file.is_dir():
        raise SourceError(name, "is a directory", "pass the .py files in it, or the directory to `accelify migrate`")
    try:
        if file.stat().st_size > MAX_BYTES:
            raise TooLargeError(name, "is larger than 20 MiB, not read", "this is not a training script")
        data = file.read_bytes()
    except FileNotFoundError:
        raise SourceError(name, "does not exist", "check the path") from None
    except OSError as error:
        raise SourceError(name, f"cannot be read: {error.strerror}", "check its permissions") from None
    return decode(data, name)


def encode(text: str, encoding: str) -> bytes:
    """Encode converted text the way the original was encoded."""
    return text.encode(encoding)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step: a temporary file in the same folder, then a rename.

    A crash or Ctrl-C leaves either the old file or the new one, never half of it. An existing file
    keeps its mode, a new one gets the mode ``open()`` would give it (umask applied), and a symbolic
    link keeps pointing where it did: its target is rewritten.
    """

    def dump(tmp: str) -> None:
        with open(tmp, "wb") as handle:
            handle.write(data)

    try:
        atomic_write(path, dump, durable=True)
    except OSError as error:
        raise OutputError(os.fspath(path), error.strerror or str(error)) from None


def write_together(files: list[tuple[str | os.PathLike[str], bytes]]) -> None:
    """Write several files as one change: every temporary file is written and flushed first, then all
    are renamed into place, so an error or Ctrl-C while writing leaves every file as it was (a script
    and the local module its conversion edits never disagree). Modes and symbolic links are kept as
    ``write_atomic`` keeps them."""
    if len(files) == 1:
        write_atomic(*files[0])
        return
    staged: list[tuple[str, str]] = []
    try:
        for path, data in files:
            target = write_destination(path)
            folder = os.path.dirname(os.path.abspath(target))
            os.makedirs(folder, exist_ok=True)
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except FileNotFoundError:
                mode = new_file_mode()
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
            staged.append((tmp, target))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode)
            fsync_path(tmp)
    except BaseException as error:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(error, OSError):
            raise OutputError(os.fspath(files[len(staged) - 1][0] if staged else files[0][0]), error.strerror or str(error)) from None
        raise
    for tmp, target in staged:
        os.replace(tmp, target)


def might_import_torch(data: bytes) -> bool:
    """A cheap test before any parse, true for every file that imports torch (and for some that do not).

    The one decision "does this file import torch" is the engine's, made on the parsed imports
    (``import os, torch``, ``x = 1; import torch`` and ``import torch.nn as nn`` all count); this
    test only lets folder discovery skip the files that cannot pass it without parsing them, so a
    file named explicitly and the same file found in a folder always get the same status.
    """
    return b"torch" in data and b"import" in data
