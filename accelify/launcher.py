"""Run a :class:`~accelify.launch_plan.LaunchPlan` through ``torch.distributed.run``, in this process.

The launcher writes the plan's :class:`~accelify.runtime.settings.Settings` to a small YAML file
(the launch file), points ``ACCELIFY_LAUNCH_CONFIG`` at it in the workers' environment, and hands
over to torch elastic (``torch.distributed.run.run``), which starts, monitors, restarts
(``--max-restarts``) and, on failure or Ctrl-C, stops every worker. When a worker fails, the
result names the rank that failed first by cause (a signal, or an error of its own rather than a
lost connection to a process that left: see :mod:`accelify.runtime.failure_report`), how it
ended (its exit code becomes the launcher's, 128 + N for signal N) and the last lines of its
traceback, read from torch elastic's error file.

This module imports torch only inside :func:`execute`, so ``accelify launch --help`` stays fast.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from accelify.launch_joined import alone_ranks
from accelify.launch_plan import LaunchError, LaunchOptions, LaunchPlan, resolve_plan

__all__ = ["LaunchError", "LaunchOptions", "LaunchPlan", "LaunchResult", "WorkerFailure",
           "check_script", "execute", "signal_name", "resolve_plan", "failure_from_error"]

TRACEBACK_LINES = 12  # of frames, in the failure summary
EXCEPTION_LINES = 20  # of the final exception's text


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number this platform does not name."""
    from accelify.runtime.failure_report import signal_name as name

    return name(number)


@dataclass(frozen=True)
class WorkerFailure:
    """The worker that failed first: its global rank, exit code, error line and traceback tail.

    ``other_ranks`` failed on their own too (later); ``consequence_ranks`` failed because a process
    left (a lost connection, a peer that failed mid-save); ``consequence`` says the first one did too.
    """

    rank: int
    exit_code: int
    message: str
    traceback_tail: tuple[str, ...]
    other_ranks: tuple[int, ...] = ()
    consequence_ranks: tuple[int, ...] = ()
    consequence: bool = False

    def describe(self) -> str:
        """A few lines for the terminal: which rank, how, and the end of its traceback."""
        from accelify.runtime.failure_report import how_it_ended

        lines = [f"accelify launch: rank {self.rank} failed first: it {how_it_ended(self.exit_code)}."]
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


@dataclass(frozen=True)
class LaunchResult:
    """How a launch ended: ``exit_code`` 0 on success, else the failing worker's (128+N for signal N)."""

    exit_code: int
    failure: WorkerFailure | None = None
    interrupted_by: int | None = None  # signal number that stopped the launcher, if any
    alone: tuple[int, ...] = ()  # ranks whose script ended without joining a process group (N > 1 only)


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def failure_from_error(error: Any) -> WorkerFailure:
    """Summarise torch elastic's ``ChildFailedError`` (its ``failures``: rank -> ProcessFailure)."""
    from accelify.runtime.failure_report import order_reports

    first, *rest = order_reports(error.failures)
    if first.message:
        text = first.message
    elif first.exit_code < 0:
        text = "no traceback was recorded: a process killed by a signal cannot report one (see its output above)"
    else:
        text = "no traceback was recorded (the process exited without a Python exception)"
    tail = _traceback_tail(_user_frames(first.callstack.rstrip().splitlines()))
    others = tuple(sorted(r.rank for r in rest if r.kind in ("cause", "abort")))
    consequences = tuple(sorted(r.rank for r in rest if r.kind == "consequence"))
    return WorkerFailure(rank=first.rank, exit_code=first.exit_code, message=text, traceback_tail=tail,
                         other_ranks=others, consequence_ranks=consequences,
                         consequence=first.kind == "consequence")


def _traceback_tail(lines: list[str]) -> tuple[str, ...]:
    """The last frames and the whole final exception text (up to a bound): a long message keeps its frames."""
    headers = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    end = headers[-1] + 1 if headers else 0
    while end < len(lines) and lines[end].startswith("    "):  # the frame's code line and its carets
        end += 1
    return tuple(lines[:end][-TRACEBACK_LINES:] + lines[end:][:EXCEPTION_LINES])


def _user_frames(lines: list[str]) -> list[str]:
    """Drop the traceback frames of the launch bootstrap and runpy: they are not the user's code."""
    out: list[str] = []
    skipping = False
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith("File "):
            skipping = "<frozen runpy>" in line or "accelify/launch_worker.py" in line.replace("\\", "/")
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return out


@contextmanager
def _launch_environment(plan: LaunchPlan) -> Iterator[str]:
    """Write the launch file and set the workers' variables; undo both afterwards."""
    from accelify.runtime.launch import write_launch_file

    path = write_launch_file(plan.settings)
    added = plan.worker_env(path)
    if plan.nproc_per_machine > 1:
        added.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    saved = {k: os.environ.get(k) for k in added}
    os.environ.update(added)
    try:
        yield path
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.unlink(path)


def check_script(plan: LaunchPlan) -> None:
    """Raise :class:`LaunchError` when the plan's script file does not exist (``-m`` modules are not checked)."""
    if not plan.module and not os.path.isfile(plan.script):
        raise LaunchError(f"{plan.script}: no such script; check the path (or pass -m to run a module).")


def execute(plan: LaunchPlan) -> LaunchResult:
    """Start the plan's workers and wait for them; never raises for a worker's failure.

    With two processes, every worker sees ``WORLD_SIZE=2``, ``RANK`` 0 or 1, and the plan's
    settings through ``ACCELIFY_LAUNCH_CONFIG``; if rank 1 raises, the result is
    ``LaunchResult(exit_code=1, failure=WorkerFailure(rank=1, ...))`` and rank 0 is stopped.
    """
    check_script(plan)
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed import DistStoreError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    args = torchrun.parse_args(plan.torchrun_args())
    with _launch_environment(plan) as launch_file:
        try:
            torchrun.run(args)
        except ChildFailedError as error:
            failure = failure_from_error(error)
            return LaunchResult(exit_code=_exit_code(failure.exit_code) or 1, failure=failure)
        except SignalException as exc:
            return LaunchResult(exit_code=128 + int(exc.sigval), interrupted_by=int(exc.sigval))
        except (RendezvousError, DistStoreError) as exc:
            raise LaunchError(
                f"the machines could not meet at {plan.main_process_ip}:{plan.main_process_port} ({exc}); check "
                "that every machine uses the same --main-process-ip/--main-process-port and was started."
            ) from exc
        except KeyboardInterrupt:
            return LaunchResult(exit_code=128 + signal.SIGINT, interrupted_by=int(signal.SIGINT))
        alone = alone_ranks(launch_file)
    return LaunchResult(exit_code=0, alone=alone)
