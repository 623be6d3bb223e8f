"""What every launch does around torch elastic: hand the settings over, and put the parent back as it was.

One helper for ``accelify launch`` (the tool's ``accelify.launch.run``) and for ``notebook_launcher`` /
``debug_launcher`` (:mod:`.launch`): :func:`launch_session` writes the run settings to a launch
file, points ``ACCELIFY_LAUNCH_CONFIG`` at it (the one settings channel, see :mod:`.settings`), sets
the other variables the launch asks for, and afterwards restores the whole environment and the
signal handlers torch elastic replaces, and deletes the file. When a worker fails, both read torch
elastic's report through :func:`.failure_report.summarise_failure`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from typing import Iterator, Mapping

from .launch_settings import LAUNCH_CONFIG_VAR, LaunchSettings, forget_launch_settings

# torch elastic installs its own handlers for these while it runs workers; a notebook gets its own back
_ELASTIC_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def write_launch_file(settings: LaunchSettings) -> str:
    """Write ``settings`` as a launch file (a temporary YAML file) and return its path; the caller deletes it.

    Point ``ACCELIFY_LAUNCH_CONFIG`` at it and the workers' ``Accelerator`` reads it (see
    :mod:`accelify.runtime.launch_settings`). :func:`launch_session` does both, and deletes it.
    """
    import yaml

    fd, path = tempfile.mkstemp(prefix="accelify-launch-", suffix=".yaml")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        yaml.safe_dump(settings.to_dict(), fh)
    return path


@contextlib.contextmanager
def launch_session(settings: LaunchSettings, env: Mapping[str, str] | None = None, *, processes: int = 1,
                   restore_all: bool = True) -> Iterator[str]:
    """Within the block, processes started here get ``settings`` (and ``env``); yields the launch file's path.

    With ``processes`` > 1 per machine, ``OMP_NUM_THREADS`` defaults to 1 (as torchrun's own default):
    N processes each using every core slow each other down. ``PYTHONHASHSEED`` defaults to 0 on every machine (one
    value for all processes, unless the user set one): with Python's hash randomisation each process would order
    the same ``set`` of strings its own way, and a program that numbers its classes by ``list(set(labels))`` trains
    each process on a different numbering, silently (set P's P5).

    Afterwards the launch file is deleted, whether the block raised or not, and the parent is put back:
    with ``restore_all`` (launches through torch elastic) ``os.environ`` is exactly what it was (torch
    elastic adds variables too) and the signal handlers torch elastic installs give way to the previous
    ones; without it (the function ran in this process, as a plain call) only the variables set here are
    undone, so what the function itself set stays. With two processes started inside, each reads
    ``ACCELIFY_LAUNCH_CONFIG`` and its ``Accelerator`` uses ``settings``.
    """
    path = write_launch_file(settings)
    added = {**(env or {}), LAUNCH_CONFIG_VAR: path}
    if processes > 1:
        added.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    added.setdefault("PYTHONHASHSEED", os.environ.get("PYTHONHASHSEED", "0"))
    saved_env = dict(os.environ) if restore_all else {k: os.environ.get(k) for k in added}
    saved_handlers = {name: signal.getsignal(getattr(signal, name))
                      for name in _ELASTIC_SIGNALS if hasattr(signal, name)} if restore_all else {}
    os.environ.update(added)
    try:
        yield path
    finally:
        if restore_all:
            os.environ.clear()
            os.environ.update(saved_env)
        else:
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if saved_handlers and threading.current_thread() is threading.main_thread():
            for name, handler in saved_handlers.items():  # torch elastic installs none outside the main thread
                if handler is not None and signal.getsignal(getattr(signal, name)) is not handler:
                    signal.signal(getattr(signal, name), handler)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        forget_launch_settings()  # a function run in this process read the file; a later launch writes another
