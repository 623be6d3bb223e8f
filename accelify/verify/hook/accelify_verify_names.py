"""Names of the script's objects, for verify's messages: the variable a frame of the script binds to an optimizer,
a scheduler or a model (``optimizer_G``, ``netG``), found by walking the caller's frames once per object.

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

import os
import sys
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


class ScriptPlaces:
    """Mixed into the recorder: the script's ``file:line`` of a frame or a traceback, the variable of an object
    (cached in its ``names``, ``models`` and ``_paths``, relative to its ``root``)."""

    def name_of(self, target: Any) -> str | None:
        """The name a frame of the script binds to ``target`` (or to a wrapper of it), looked up once per object."""
        try:
            if target in self.names:
                return self.names[target]
        except TypeError:
            return None
        found = self.names[target] = bound_name(sys._getframe(1), target, self._relative)
        return found

    def _model_name(self, optimizer: Any, params: list[Any]) -> str | None:
        """The name of the module (or its wrapper) in the script holding the optimizer's first parameter."""
        if optimizer not in self.models:
            self.models[optimizer] = model_name(sys._getframe(1), params[0], self._relative, self.torch.nn.Module) \
                if params else None
        return self.models[optimizer]

    def _relative(self, filename: str) -> str | None:
        relative = self._paths.get(filename, "")
        if relative == "":
            real = os.path.realpath(filename) if not filename.startswith("<") else ""
            relative = self._paths[filename] = real[len(self.root):] if real.startswith(self.root) else None
        return relative

    def _raised(self, traceback: Any) -> str | None:
        """``file:line`` of the script's innermost frame in an exception's ``traceback``."""
        found = None
        while traceback is not None:
            relative = self._relative(traceback.tb_frame.f_code.co_filename)
            if relative:
                found = f"{relative}:{traceback.tb_lineno}"
            traceback = traceback.tb_next
        return found

    def _site(self, frame: Any) -> str:
        """``file:line`` of the innermost frame in the script's folder (the loop that iterates the loader)."""
        while frame is not None:
            relative = self._relative(frame.f_code.co_filename)
            if relative:
                return f"{relative}:{frame.f_lineno}"
            frame = frame.f_back
        return "<outside the script>"
