"""Run a :class:`~accelify.launch.plan.LaunchPlan` through ``torch.distributed.run``, in this process.

The launcher writes the plan's :class:`~accelify.runtime.launch_settings.LaunchSettings` to a small YAML file
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
from dataclasses import dataclass
from typing import Any

from accelify.errors import LaunchError
from accelify.launch.plan import WORKER_MODULE, LaunchOptions, LaunchPlan, resolve_plan
from accelify.runtime.failure_report import WorkerFailure, signal_name, summarise_failure

__all__ = ["LaunchError", "LaunchOptions", "LaunchPlan", "LaunchResult", "WorkerFailure",
           "check_script", "execute", "signal_name", "resolve_plan", "failure_from_error"]

WORKER_FILE = WORKER_MODULE.replace(".", "/") + ".py"  # its frames are left out of a failure's traceback


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
    return summarise_failure(error.failures, hidden_file=WORKER_FILE)


def check_script(plan: LaunchPlan) -> tuple[str, ...]:
    """Raise :class:`LaunchError` when the plan's script file does not exist (``-m`` modules are not checked), or is
    a notebook that cannot run as a program; the notes to show (a notebook's IPython lines that will not run)."""
    if not plan.module and not os.path.isfile(plan.script):
        raise LaunchError(f"{plan.script}: no such script; check the path (or pass -m to run a module).")
    if plan.module or not plan.script.endswith(".ipynb"):
        return ()
    from accelify.errors import SourceError
    from accelify.notebook import read_notebook, runnable_program

    try:
        _, skipped = runnable_program(read_notebook(plan.script)[0], plan.script)
    except SourceError as error:
        raise LaunchError(f"{error}; a notebook runs as its code cells in order") from None
    return tuple(f"{plan.script}:{line} (IPython: not run as a program)" for line in skipped)


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

    from accelify.launch.joined import alone_ranks
    from accelify.runtime.launch_session import launch_session

    args = torchrun.parse_args(plan.torchrun_args())
    with launch_session(plan.settings, plan.worker_env(), processes=plan.nproc_per_machine) as launch_file:
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
