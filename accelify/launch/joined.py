"""Did each launched worker join the process group? A worker that never does trains alone: ``accelify launch -n 2``
of an unconverted script runs it twice, independently, and exits 0.

The worker side (:func:`watch`, then :func:`note_if_alone` when the script ended) notices when torch.distributed
sets a default process group, by wrapping ``distributed_c10d._update_default_pg`` as soon as that module is imported
(the worker imports nothing before the script, so nothing is paid for it). A worker of an N > 1 launch that ended
without ever joining leaves an empty marker next to the launch file, ``<launch file>.alone.<rank>``; the
launcher (:func:`alone_ranks`, before it deletes the launch file) collects and removes them.
"""

from __future__ import annotations

import glob
import importlib.abc
import os
import sys
from types import ModuleType
from typing import Any

_C10D = "torch.distributed.distributed_c10d"
_state = {"joined": False}


class _C10DWatcher(importlib.abc.MetaPathFinder):
    """Wraps ``_update_default_pg`` right after torch's c10d module is imported."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _C10D:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _wrap(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _wrap(c10d: ModuleType) -> None:
    update = getattr(c10d, "_update_default_pg", None)
    if update is None:  # another torch: fall back to is_initialized() at the end
        return

    def update_default_pg(pg: Any) -> Any:
        if pg is not None:
            _state["joined"] = True
        return update(pg)

    c10d._update_default_pg = update_default_pg


def watch() -> None:
    """Start noticing whether this process joins a process group (call before the script runs)."""
    if _C10D in sys.modules:
        _wrap(sys.modules[_C10D])
    else:
        sys.meta_path.insert(0, _C10DWatcher())


def joined() -> bool:
    """True if this process joined a process group since :func:`watch` (or is in one now)."""
    if _state["joined"]:
        return True
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def note_if_alone(launch_file: str | None) -> None:
    """In a worker of an N > 1 launch whose script ended without joining a group, leave the marker."""
    if not launch_file or int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1 or joined():
        return
    try:
        with open(f"{launch_file}.alone.{os.environ.get('RANK', '0')}", "w", encoding="utf-8"):
            pass
    except OSError:  # the warning is a courtesy: never fail a finished run for it
        pass


def alone_ranks(launch_file: str) -> tuple[int, ...]:
    """The ranks that ended without joining a group (their markers are removed)."""
    ranks = []
    for marker in glob.glob(glob.escape(launch_file) + ".alone.*"):
        try:
            ranks.append(int(marker.rsplit(".", 1)[1]))
            os.unlink(marker)
        except (ValueError, OSError):
            continue
    return tuple(sorted(ranks))


def alone_warning(script: str, ranks: tuple[int, ...], processes: int) -> str:
    """What ``accelify launch`` says at the end when workers never joined the process group."""
    who = f"the {processes} processes" if len(ranks) >= processes else \
        f"process{'es' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    return (f"accelify launch: warning: {who} of {script} never joined a process group: each ran the whole script "
            "on its own (an independent copy of the model, all of the data), so this was not one training on "
            f"{processes} processes. Convert it first (accelify convert {script} -o dist/: the script and every local "
            f"module it imports, converted where the conversion changes them, in a folder of their own), then launch "
            f"dist/{os.path.basename(script)}; `accelify verify {script}` checks it.")
