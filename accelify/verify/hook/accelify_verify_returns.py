"""Values the verified script's own functions return at epoch level, recorded for ``same returned values``.

An epoch-level function is one of the script's own files (under ``ACCELIFY_VERIFY_ROOT``) during whose call a
DataLoader yielded batches and whose return comes after that loader's epoch ended: ``val_loss = evaluate(model,
val_loader)``, ``acc = test(...)``, ``train_one_epoch(...)`` returning the epoch's mean loss. What it returns is an
aggregate whether or not the script prints it: a best checkpoint chosen on it, an early stop decided on it. Its
return value is recorded when it is a number (a Python or numpy number, a one-element tensor) or a tuple or list of
up to 8 of them, as a ``line`` event with ``via`` ``return``: ``"evaluate() -> 0.59375"`` with the function's
``file:line``. A helper called inside a batch loop (a per-step loss) never qualifies: no epoch ends inside it.

How, cheaply: a ``sys.settrace`` function that looks at each Python call while no loader's epoch is in progress
(the recorder turns tracing off at an epoch's first batch and on at its end, so a training or evaluation loop runs
untraced) and traces only frames of the script's files, for their ``return`` event only (no line events). The first
``PER_FUNCTION`` qualifying returns of each function are recorded. Tracing starts when the first loader epoch ends
(the script's set-up, models and data built before any batch, runs untraced: in a small script it cost 0.6 s of CPU
of 4.8 s). At every epoch's end the script's frames on the stack that are not traced yet get the return tracer too:
the function whose loop just ended and its callers, though their call came while tracing was off
(``train_one_epoch`` on epoch 0, an ``evaluate`` called inside a training epoch every k steps). Tracing stops for
good when the first optimizer step comes without any DataLoader batch (batches made by hand: verify compares no
values without a prepared loader) and at exit. Traced code runs about 2x slower (a tiny model's forward outside a
loader epoch: 33 us untraced, 66 us traced).

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

PER_FUNCTION = 64  # returns recorded per function
MAX_VALUES = 8  # numbers of a returned tuple or list
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR: a yield is not a return


class Returns:
    """The tracer of one process's main thread; :meth:`epoch` turns it off inside loader epochs."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.counts: dict[Any, int] = {}  # code object -> returns recorded
        self.thread = threading.get_ident()
        self.tracing = False
        self.stopped = False

    def start(self) -> None:
        """Trace from now on (the main thread), unless an epoch is in progress (the recorder leaves it to the first
        epoch's end: :meth:`epoch`)."""
        if threading.get_ident() == self.thread and not self.recorder.in_epoch:
            self.tracing = True
            sys.settrace(self._call)

    def stop(self) -> None:
        """Trace no more: the training steps without any DataLoader (batches made by hand), so no function can
        return after a loader's epoch, and verify compares no values without a prepared loader anyway."""
        if threading.get_ident() == self.thread and sys.gettrace() == self._call:
            sys.settrace(None)
        self.tracing, self.stopped = False, True

    def epoch(self, inside: bool) -> None:
        """A loader's epoch started (``inside``) or ended: tracing off, or back on."""
        if self.stopped or threading.get_ident() != self.thread or sys.gettrace() not in (None, self._call):
            return  # stopped, another thread, or a debugger took over tracing: leave it
        if inside and self.tracing:
            sys.settrace(None)
            self.tracing = False
        elif not inside and not self.tracing:
            sys.settrace(self._call)
            self.tracing = True
        if not inside:
            self._attach(sys._getframe(1))

    def _attach(self, frame: Any) -> None:
        """Trace the returns of the script's frames on the stack at an epoch's end that are not traced yet: the
        function whose loop just ended and its callers (``train_one_epoch`` on epoch 0, an ``evaluate`` called
        inside a training epoch, where tracing was off at their call)."""
        while frame is not None:
            if frame.f_trace is None:
                local = self._local(frame, -1)
                if local is not None:
                    frame.f_trace = local
            frame = frame.f_back

    def _call(self, frame: Any, event: str, arg: Any) -> Any:
        return self._local(frame, self.recorder.draws) if event == "call" else None

    def _local(self, frame: Any, start: int) -> Any:
        """The return tracer for ``frame`` (batches drawn before its call: ``start``), or None for a frame that is
        not a function of the script's files."""
        code = frame.f_code
        if code.co_flags & _GENERATOR_FLAGS or code.co_name.startswith("<"):
            return None
        relative = self.recorder._relative(code.co_filename)
        if not relative or self.counts.get(code, 0) >= PER_FUNCTION:
            return None
        frame.f_trace_lines = False

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "return" and arg is not None:
                self._returned(code, relative, start, arg)
            return local

        return local

    def _returned(self, code: Any, relative: str, start: int, value: Any) -> None:
        recorder = self.recorder
        if not recorder.active or recorder.in_epoch or recorder.draws == start:
            return
        from accelify_verify_logged import scalar

        values = list(value) if isinstance(value, (tuple, list)) and 0 < len(value) <= MAX_VALUES else [value]
        numbers = [scalar(v) for v in values]
        if any(n is None for n in numbers):
            return
        self.counts[code] = self.counts.get(code, 0) + 1
        name = getattr(code, "co_qualname", code.co_name)
        text = f"{name}() -> " + ", ".join(repr(n) for n in numbers)
        recorder.on_line(text, None, via="return", site=f"{relative}:{code.co_firstlineno}")
