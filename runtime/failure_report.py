"""torch elastic's failure report, read in one place: which worker failed first, how, and its error.

When workers fail, torch elastic (``torch.distributed.run``, ``elastic_launch``) raises
``ChildFailedError`` whose ``failures`` map each failed global rank to a ``ProcessFailure``: the
exit code (negative: killed by that signal), a timestamp in whole seconds, and the error file the
worker's recorder wrote (``message`` = ``"Type: text"``, ``extraInfo.py_callstack`` = the traceback).
Once one worker fails, the agent stops the others with SIGTERM; the others often fail first in
their own way too (Gloo reports "Connection reset by peer" as soon as a peer dies), so timestamps
alone name the wrong process. Workers are therefore ordered by cause, then time, then rank:

1. ``cause``: it failed on its own: killed by a signal other than SIGTERM/SIGABRT (SIGKILL is
   usually the out-of-memory killer), exited non-zero without a record, or recorded an exception
   that is not a consequence of another process leaving;
2. ``abort``: SIGABRT with nothing recorded: a native abort, often a backend reacting to a lost peer;
3. ``consequence``: it recorded an exception caused by another process leaving: a broken Gloo or
   NCCL connection, a lost store connection, or one of the runtime's
   :class:`~.errors.PeerFailureError` (another process failed mid-save, left a debug-checked collective);
4. ``stopped``: SIGTERM with nothing recorded: how the agent stops the survivors.

Importing this module costs nothing (no torch): ``accelify launch`` reads the report with it.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import peer_failure_names

KINDS = ("cause", "abort", "consequence", "stopped")  # the order in which failures are reported

# Text in an exception line that means "another process left": Gloo's transport errors (reset,
# closed, timed out: they always carry this source path), NCCL's remote errors, a lost store.
_PEER_LOSS_MARKERS = (
    "gloo/transport/",
    "ncclRemoteError",
    "remote process exited",
    "Connection closed by remote peer",
    "NCCL communicator was aborted",
)
_PEER_LOSS_TYPES = ("DistNetworkError",)

_SIGNAL_NOTES = {
    "SIGKILL": "likely out of memory: the kernel's out-of-memory killer sends SIGKILL; check `dmesg`, "
               "and lower the memory use or the batch size",
    "SIGSEGV": "a segmentation fault in native code",
    "SIGBUS": "a bus error: often a full /dev/shm (DataLoader workers share memory there)",
    "SIGABRT": "a native abort, e.g. by the communication backend",
}


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number this platform does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def how_it_ended(exit_code: int) -> str:
    """``exited with code 1``; ``was killed by SIGKILL (likely out of memory: ...)`` for exit code -9."""
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    name = signal_name(-exit_code)
    note = _SIGNAL_NOTES.get(name)
    return f"was killed by {name}" + (f" ({note})" if note else "")


@dataclass(frozen=True)
class WorkerReport:
    """One failed worker as torch elastic reported it, classified (``kind`` is one of :data:`KINDS`)."""

    rank: int
    exit_code: int  # negative: killed by that signal
    kind: str
    message: str  # the recorded exception line ("ValueError: boom"), or "" when nothing was recorded
    callstack: str  # the recorded traceback, or ""
    timestamp: int  # seconds; the recorded time, else when the agent noticed the exit


def _recorded(failure: Any) -> tuple[str, str]:
    """(exception line, traceback) from the worker's error file; ``("", "")`` when it wrote none."""
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    message = data.get("message")
    if isinstance(message, dict):
        return str(message.get("message", "")), str(message.get("extraInfo", {}).get("py_callstack", "") or "")
    if message in (None, "<NONE>"):  # torch elastic's placeholder when the worker wrote no error file
        return "", ""
    return str(message), ""


def _exception_lines(message: str, callstack: str) -> list[str]:
    """The exception lines of a recorded error (chained ones too), without the code of its frames."""
    lines = [message]
    for line in callstack.splitlines():  # frames are indented; exception lines start at column 0
        if line and not line[0].isspace() and not line.startswith("Traceback (most recent call last)"):
            lines.append(line)
    return lines


def is_consequence(message: str, callstack: str = "") -> bool:
    """Whether a recorded error is how this process saw another one leave (not a cause of its own)."""
    types = "|".join(sorted({*peer_failure_names(), *_PEER_LOSS_TYPES}))
    pattern = re.compile(rf"^(?:[\w.]+\.)?(?:{types}):")
    for line in _exception_lines(message, callstack):
        if pattern.match(line) or any(marker in line for marker in _PEER_LOSS_MARKERS):
            return True
    return False


def read_report(rank: int, failure: Any) -> WorkerReport:
    """Classify torch elastic's ``ProcessFailure`` for global ``rank``."""
    message, callstack = _recorded(failure)
    code = int(failure.exitcode)
    if message:
        kind = "consequence" if is_consequence(message, callstack) else "cause"
    elif code == -signal.SIGTERM:
        kind = "stopped"
    elif code == -signal.SIGABRT:
        kind = "abort"
    else:
        kind = "cause"
    return WorkerReport(rank=rank, exit_code=code, kind=kind, message=message, callstack=callstack,
                        timestamp=int(failure.timestamp))


def order_reports(failures: Mapping[int, Any]) -> list[WorkerReport]:
    """Every failed worker from ``ChildFailedError.failures``, the one that failed first first.

    With two processes, if rank 1 was SIGKILLed and rank 0 then recorded Gloo's "Connection reset by
    peer" before the agent's SIGTERM reached it, rank 1 comes first.
    """
    reports = [read_report(rank, failure) for rank, failure in failures.items()]
    return sorted(reports, key=lambda r: (KINDS.index(r.kind), r.timestamp, r.rank))


def first_failed_rank(failures: Mapping[int, Any]) -> int:
    """The rank :func:`order_reports` puts first."""
    return order_reports(failures)[0].rank


# ---------------------------------------------------------------- the summary both launchers show
TRACEBACK_LINES = 12  # of frames, in the summary
EXCEPTION_LINES = 20  # of the final exception's text


@dataclass(frozen=True)
class WorkerFailure:
    """The worker that failed first: its global rank, exit code, error line and traceback tail.

    ``other_ranks`` failed on their own too (later); ``consequence_ranks`` failed because a process
    left (a lost connection, a peer that failed mid-save); ``consequence`` says the first one did too.
    ``callstack`` is its whole recorded traceback ("" when none was recorded).
    """

    rank: int
    exit_code: int
    message: str
    traceback_tail: tuple[str, ...]
    other_ranks: tuple[int, ...] = ()
    consequence_ranks: tuple[int, ...] = ()
    consequence: bool = False
    callstack: str = ""

    def describe(self, prog: str = "accelify launch") -> str:
        """A few lines for the terminal: which rank, how, and the end of its traceback."""
        lines = [f"{prog}: rank {self.rank} failed first: it {how_it_ended(self.exit_code)}."]
        if self.traceback_tail:
            lines.append(f"Last lines of rank {self.rank}'s traceback:")
            lines += [f"  {line}" for line in self.traceback_tail]
        elif self.message:
            lines.append(f"  {self.message}")
        if self.consequence:
            lines.append(f"Rank {self.rank}'s error is how it saw another process leave; no process reported a failure "
                         "of its own. One may have exited early (a collective that only some processes call?) or been "
                         "stopped from outside.")
        if self.other_ranks:
            lines.append(f"Also failed: rank {', '.join(map(str, self.other_ranks))}.")
        if self.consequence_ranks:
            ranks = ", ".join(map(str, self.consequence_ranks))
            lines.append(f"Also failed the same way: rank {ranks}." if self.consequence
                         else f"Failed because rank {self.rank} did: rank {ranks}.")
        return "\n".join(lines)


def summarise_failure(failures: Mapping[int, Any], hidden_file: str | None = None) -> WorkerFailure:
    """Summarise ``ChildFailedError.failures`` (rank -> ``ProcessFailure``): the first failure by cause.

    ``hidden_file`` (a path ending, e.g. ``"accelify/launch/worker.py"``) names a bootstrap whose
    frames, and runpy's, are left out of the traceback tail: they are not the user's code.
    """
    first, *rest = order_reports(failures)
    if first.message:
        text = first.message
    elif first.exit_code < 0:
        text = "no traceback was recorded: a process killed by a signal cannot report one (see its output above)"
    else:
        text = "no traceback was recorded (the process exited without a Python exception)"
    lines = first.callstack.rstrip().splitlines()
    tail = _traceback_tail(_user_frames(lines, hidden_file) if hidden_file else lines)
    return WorkerFailure(
        rank=first.rank, exit_code=first.exit_code, message=text, traceback_tail=tail,
        other_ranks=tuple(sorted(r.rank for r in rest if r.kind in ("cause", "abort"))),
        consequence_ranks=tuple(sorted(r.rank for r in rest if r.kind == "consequence")),
        consequence=first.kind == "consequence", callstack=first.callstack,
    )


def _traceback_tail(lines: list[str]) -> tuple[str, ...]:
    """The last frames and the whole final exception text (up to a bound): a long message keeps its frames."""
    headers = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    end = headers[-1] + 1 if headers else 0
    while end < len(lines) and lines[end].startswith("    "):  # the frame's code line and its carets
        end += 1
    return tuple(lines[:end][-TRACEBACK_LINES:] + lines[end:][:EXCEPTION_LINES])


def _user_frames(lines: list[str], hidden_file: str) -> list[str]:
    """Drop the traceback frames of the launch bootstrap and runpy: they are not the user's code."""
    out: list[str] = []
    skipping = False
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith("File "):
            skipping = "<frozen runpy>" in line or hidden_file in line.replace("\\", "/")
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return out
