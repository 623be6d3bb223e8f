"""Names of the script's objects, for verify's messages: the variable a frame of the script binds to an optimizer,
a scheduler or a model (``optimizer_G``, ``netG``), found by walking the caller's frames once per object.

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

from typing import Any, Callable

_WRAPPING = ("optimizer", "module", "scheduler")  # AcceleratedOptimizer, DDP, AcceleratedScheduler hold these


def number(value: Any) -> float | None:
    """A learning rate as a float (a tensor lr too); None when it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _wraps(value: Any, target: Any) -> bool:
    if value is target:
        return True
    if isinstance(value, type):
        return False
    for attr in _WRAPPING:
        try:
            if getattr(value, attr, None) is target:
                return True
        except Exception:  # an object whose __getattr__ does more than look up
            continue
    return False


def bound_name(frame: Any, target: Any, in_script: Callable[[str], str | None]) -> str | None:
    """The name bound to ``target`` (or to a wrapper of it) in the innermost frame of the script that has one."""
    while frame is not None:
        if in_script(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in list(scope.items()):
                    if not name.startswith("__") and _wraps(value, target):
                        return name
        frame = frame.f_back
    return None


def model_name(frame: Any, parameter: Any, in_script: Callable[[str], str | None], module_type: type) -> str | None:
    """The name of the module (or its DDP wrapper) in the script whose parameters include ``parameter``."""
    while frame is not None:
        if in_script(frame.f_code.co_filename):
            for scope in (frame.f_locals, frame.f_globals):
                for name, value in list(scope.items()):
                    module = value if isinstance(value, module_type) else None
                    if module is not None and any(p is parameter for p in module.parameters()):
                        return name
        frame = frame.f_back
    return None
