"""What the verified script prints to stdout, line by line, for the recorder (``printed`` check of ``accelify verify``).

:class:`PrintedLines` stands in for ``sys.stdout`` (``print``, ``accelerator.print`` and ``sys.stdout.write`` all
end there; a logging handler made after the script started holds it too). It writes everything through to the real
stream unchanged and hands each complete line that holds a digit to a callback with the frame that printed it. The
recorder tags the line with whether a DataLoader's epoch was in progress (a batch drawn, its epoch not ended), the
backwards taken so far, and the script's ``file:line`` that printed it.

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

MAX_LINE = 2000  # characters of a line kept (a tensor printed whole is cut)


class PrintedLines:
    """A text stream that writes through to ``stream`` and reports each complete line holding a digit."""

    def __init__(self, stream: Any, on_line: Callable[[str, Any], None], active: Callable[[], bool]) -> None:
        self._stream = stream
        self._on_line = on_line
        self._active = active
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: Any) -> Any:
        written = self._stream.write(text)
        if isinstance(text, str) and self._active():
            self._collect(text)
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _collect(self, text: str) -> None:
        with self._lock:
            if "\n" not in text:
                if len(self._pending) < MAX_LINE:
                    self._pending += text
                return
            parts = (self._pending + text).split("\n")
            self._pending = parts.pop()[:MAX_LINE]
        caller = sys._getframe(2)
        for line in parts:
            line = line.rsplit("\r", 1)[-1]  # a progress line rewritten in place: what is left on screen
            if any(ch.isdigit() for ch in line):
                self._on_line(line[:MAX_LINE], caller)

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, flush, buffer, ...
        return getattr(self._stream, name)


def install(on_line: Callable[[str, Any], None], active: Callable[[], bool]) -> PrintedLines:
    """Put a :class:`PrintedLines` in front of ``sys.stdout`` (and ``sys.__stdout__`` stays the real stream)."""
    lines = PrintedLines(sys.stdout, on_line, active)
    sys.stdout = lines
    return lines


def record_unprinted(cls: type, recorder: Any) -> None:
    """``accelerator.print`` on the other processes: what it would have printed is recorded as a silent line, so
    verify can tell a value reduced over the processes (equal on all) from one process's share."""
    original = cls.print

    @functools.wraps(original)
    def print_(self: Any, *args: Any, **kwargs: Any) -> None:
        if recorder.active and kwargs.get("file") is None and not self.is_local_main_process:
            try:
                sep, end = kwargs.get("sep"), kwargs.get("end")
                text = (" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end)
                for line in text.split("\n")[:-1]:
                    if any(ch.isdigit() for ch in line):
                        recorder.on_line(line, sys._getframe(1), silent=True)
            except Exception:  # a value whose str() fails: print raises it below, as it would have
                pass
        return original(self, *args, **kwargs)

    cls.print = print_
