"""Copy-on-write for a verify run's folder: the script reads the user's files in place and never writes them.

``accelify verify`` runs a script in a mirror of the folders around it (``accelify.verify.workspace.stage``): the
script's folder and up to two folders above it are real folders in the run's temporary directory, and every other
entry in them is a symbolic link to the user's file or folder, so ``data/train.txt`` and ``../data`` are read as in
a normal run. Writing through such a link would change the user's file: this module, installed in each run's
process, turns a link into the run's own copy just before the script writes to it (a linked folder becomes a real
folder of links; a linked file is removed, or copied first when it is opened to append or update).

The mirror's top folder holds the marker file ``MARKER``; the process finds it from ``ACCELIFY_VERIFY_ROOT`` (the
script's folder). Imports nothing of accelify.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import sys
from typing import Any, Callable

MARKER = ".accelify-verify-sandbox"
_state: dict[str, str] = {}


def install_from_environment() -> bool:
    """Install the copy-on-write patches when the run's folder lies in a mirror; whether it does."""
    root = os.environ.get("ACCELIFY_VERIFY_ROOT")
    top = _find_top(root) if root else None
    if top is None or _state.get("top"):
        return False
    _state["top"] = top
    _patch()
    return True


def _find_top(folder: str) -> str | None:
    here = os.path.abspath(folder)
    while True:
        if os.path.isfile(os.path.join(here, MARKER)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def own(path: Any, *, keep: bool = False, folder: bool = False) -> None:
    """Make ``path`` the run's own before it is written: the linked folders on its way become real folders of
    links; a link at ``path`` itself is replaced (by a copy of its file when ``keep``; by a real folder of links when
    ``folder``)."""
    top = _state.get("top")
    if top is None or isinstance(path, int):
        return
    try:
        full = os.path.abspath(os.fsdecode(path))
    except TypeError:
        return
    if not full.startswith(top + os.sep):
        return
    parts = os.path.relpath(full, top).split(os.sep)
    here = top
    for part in parts[:-1]:
        here = os.path.join(here, part)
        if os.path.islink(here) and os.path.isdir(here):
            _materialise(here)
    if not os.path.islink(full):
        return
    if os.path.isdir(full):
        if folder:
            _materialise(full)
    elif keep:
        target = os.path.realpath(full)
        os.unlink(full)
        shutil.copy2(target, full)
    else:
        os.unlink(full)


def _materialise(link: str) -> None:
    """Replace the folder link ``link`` by a real folder holding a link to each of its entries."""
    target = os.path.realpath(link)
    os.unlink(link)
    os.mkdir(link)
    for entry in os.listdir(target):
        os.symlink(os.path.join(target, entry), os.path.join(link, entry))


def _writes(mode: str) -> bool:
    return any(c in mode for c in "wax+")


def _patch() -> None:
    opened = builtins.open

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if _writes(mode):
            own(file, keep="a" in mode or "+" in mode and "w" not in mode)
        return opened(file, mode, *args, **kwargs)

    builtins.open = open_
    io.open = open_

    os_open = os.open

    def os_open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            own(path, keep=not flags & os.O_TRUNC)
        return os_open(path, flags, *args, **kwargs)

    os.open = os_open_
    _before(os, "mkdir", lambda path, *a, **k: own(path))
    _before(shutil, "rmtree", lambda path, *a, **k: own(path, folder=True))
    if "torch" in sys.modules:
        patch_torch(sys.modules["torch"])


def _before(owner: Any, name: str, first: Callable[..., None]) -> None:
    original = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if args:
            first(*args, **kwargs)
        return original(*args, **kwargs)

    wrapped.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)


def patch_torch(torch: Any) -> None:
    """``torch.save`` opens a path in C++, past ``open``: own the path first. The recorder calls this when the
    script imports torch (once installed; before, it does nothing)."""
    if _state.get("top") and not _state.get("torch"):
        _state["torch"] = "patched"
        _before(torch, "save", lambda obj, f=None, *a, **k: own(f))
