"""Values the verified script logs, recorded for the ``same logged values`` check of ``accelify verify``.

Each logged number becomes a ``line`` event (as a printed line does) with ``via`` naming how it was logged, the
script's ``file:line`` that logged it and whether a DataLoader epoch was in progress, so that verify compares it like
a printed value:

- ``SummaryWriter.add_scalar(tag, value, step)`` / ``add_scalars(main_tag, {tag: value})`` of
  ``torch.utils.tensorboard`` and ``tensorboardX``: ``"tag value"`` (``via`` ``add_scalar``);
- ``accelerator.log({key: value}, step=)`` of ``accelify.runtime`` and HF Accelerate: one line per number, on every
  process (on those that log nothing, as a silent line: what a process's share would have logged); what its own
  trackers then write (TensorBoard, wandb) is not recorded again;
- ``wandb.log({key: value})`` (``Run.log``) when wandb is importable: one line per number;
- ``logging``: the message of every record a logger of the script's own files handles (``logger.info("acc %.4f",
  acc)``, f-strings), whatever its handlers write to (a file, stdout: a record written to stdout is recorded once,
  as logged; a library's record written to stdout stays a printed line).

The step argument is not recorded: a step count is compared by ``same schedule``. Numbers handed over as values
(not text) are written with ``repr``: verify compares them without a printed digit's slack.

Like the recorder, this module imports nothing of accelify and nothing but the standard library at import time.
"""

from __future__ import annotations

import functools
import sys
import threading
from types import ModuleType
from typing import Any, Callable

EXACT_VIAS = ("add_scalar", "accelerator.log", "wandb.log")  # numbers logged as values, not as text
WRITER_MODULES = ("torch.utils.tensorboard.writer", "tensorboardX.writer")
ACCELERATOR_MODULES = ("accelify.runtime.accelerator", "accelerate.accelerator")
MAX_KEYS = 64  # numbers recorded per logging call (a dict of per-layer statistics is cut)

_inside = threading.local()  # value: a logging record is being handled (what its handlers print is not a printed
# line); tracker: accelerator.log is writing to its trackers (what they log is not recorded again)


def muted() -> bool:
    """A logging record is being handled on this thread (its handlers' stdout lines are recorded as logged)."""
    return getattr(_inside, "value", False)


def scalar(value: Any) -> float | None:
    """``value`` as a float when it is one number (a Python or numpy number, a one-element tensor); else None."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes)):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        if getattr(value, "numel", None) is not None and value.numel() != 1:
            return None
        if getattr(value, "size", 1) != 1 and not callable(getattr(value, "size", None)):
            return None
        item = value.item()
    except Exception:
        return None
    return None if isinstance(item, bool) or not isinstance(item, (int, float)) else float(item)


def install(recorder: Any) -> Callable[[], dict[str, Callable[[ModuleType], None]]]:
    """Patch ``logging`` now; return the after-import callbacks for the trackers (module name -> patch)."""
    patch_logging(recorder)

    def callbacks() -> dict[str, Callable[[ModuleType], None]]:
        found: dict[str, Callable[[ModuleType], None]] = {}
        for name in WRITER_MODULES:
            found[name] = lambda module: patch_writer(module, recorder)
        for name in ACCELERATOR_MODULES:
            found[name] = lambda module: patch_accelerator(module, recorder)
        found["wandb.sdk.wandb_run"] = lambda module: patch_wandb(module, recorder)
        return found

    return callbacks


def _record(recorder: Any, via: str, pairs: Any, caller: Any, silent: bool = False) -> None:
    if getattr(_inside, "tracker", False) and via != "accelerator.log":
        return  # a tracker accelerator.log writes to (its TensorBoard, wandb): recorded once, as accelerator.log
    for count, (key, value) in enumerate(pairs):
        if count >= MAX_KEYS:
            break
        number = scalar(value)
        if number is not None:
            recorder.on_line(f"{key} {number!r}", caller, silent=silent, via=via)


def patch_logging(recorder: Any) -> None:
    """``Logger.callHandlers``: the message of a record logged from the script's files, recorded once."""
    import logging

    original = logging.Logger.callHandlers
    if getattr(original, "_accelify_verify", False):
        return

    @functools.wraps(original)
    def call_handlers(self: Any, record: Any) -> Any:
        if not recorder.active or muted():
            return original(self, record)
        try:
            relative = recorder._relative(record.pathname)
            if not relative:  # a library's record: what its handlers print is recorded as printed, as before
                return original(self, record)
            for line in record.getMessage().split("\n"):
                if any(ch.isdigit() for ch in line):
                    recorder.on_line(line[:2000], None, via="logging", site=f"{relative}:{record.lineno}")
        except Exception:  # a message whose formatting fails: the handlers report it as they would have
            pass
        _inside.value = True
        try:
            return original(self, record)
        finally:
            _inside.value = False

    call_handlers._accelify_verify = True  # type: ignore[attr-defined]
    logging.Logger.callHandlers = call_handlers


def patch_writer(module: ModuleType, recorder: Any) -> None:
    """``SummaryWriter.add_scalar`` and ``add_scalars`` of a tensorboard writer module."""
    cls = getattr(module, "SummaryWriter", None)
    if cls is None or getattr(cls, "_accelify_verify", False):
        return
    add_scalar, add_scalars = cls.add_scalar, getattr(cls, "add_scalars", None)

    @functools.wraps(add_scalar)
    def recorded_scalar(self: Any, tag: Any, scalar_value: Any = None, *args: Any, **kwargs: Any) -> Any:
        if recorder.active:
            _record(recorder, "add_scalar", [(tag, scalar_value)], sys._getframe(1))
        return add_scalar(self, tag, scalar_value, *args, **kwargs)

    cls.add_scalar = recorded_scalar
    if add_scalars is not None:
        @functools.wraps(add_scalars)
        def recorded_scalars(self: Any, main_tag: Any, tag_scalar_dict: Any = None, *args: Any, **kwargs: Any) -> Any:
            if recorder.active and isinstance(tag_scalar_dict, dict):
                _record(recorder, "add_scalar", [(f"{main_tag}/{k}", v) for k, v in tag_scalar_dict.items()],
                        sys._getframe(1))
            return add_scalars(self, main_tag, tag_scalar_dict, *args, **kwargs)

        cls.add_scalars = recorded_scalars
    cls._accelify_verify = True


def patch_accelerator(module: ModuleType, recorder: Any) -> None:
    """``Accelerator.log``: every number, on every process (silent where the process logs nothing)."""
    cls = getattr(module, "Accelerator", None)
    if cls is None or getattr(cls, "_accelify_verify", False) or not hasattr(cls, "log"):
        return
    log = cls.log

    @functools.wraps(log)
    def recorded_log(self: Any, values: Any, *args: Any, **kwargs: Any) -> Any:
        if recorder.active and isinstance(values, dict):
            try:
                silent = not bool(self.is_main_process)
            except Exception:
                silent = False
            _record(recorder, "accelerator.log", values.items(), sys._getframe(1), silent=silent)
        _inside.tracker = True
        try:
            return log(self, values, *args, **kwargs)
        finally:
            _inside.tracker = False

    cls.log = recorded_log
    cls._accelify_verify = True


def patch_wandb(module: ModuleType, recorder: Any) -> None:
    """``wandb``'s ``Run.log`` (``wandb.log`` is the run's ``log`` once ``wandb.init`` ran)."""
    cls = getattr(module, "Run", None)
    if cls is None or getattr(cls, "_accelify_verify", False) or not hasattr(cls, "log"):
        return
    log = cls.log

    @functools.wraps(log)
    def recorded_log(self: Any, data: Any = None, *args: Any, **kwargs: Any) -> Any:
        if recorder.active and isinstance(data, dict):
            _record(recorder, "wandb.log", data.items(), sys._getframe(1))
        return log(self, data, *args, **kwargs)

    cls.log = recorded_log
    cls._accelify_verify = True
