"""The worker processes of ``accelify migrate``: jobs converted in parallel, results streamed back.

At most ``4 * workers`` jobs are in flight, so results never pile up in memory; a worker that dies fails its
scripts, not the run; Ctrl-C is the parent's to handle (the workers ignore it).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Iterator, Sequence

from accelify.codemods.engine.outcome import FAILED
from accelify.migrate.grouping import Job
from accelify.results import Result


def convert_job(job: Job) -> list[Result]:
    """Convert a job's scripts, one after the other (in a worker process, or here)."""
    from accelify.pipeline import convert_path

    return [convert_path(task.path, target=task.target, disabled=task.disabled) for task in job.tasks]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _context() -> multiprocessing.context.BaseContext:
    """forkserver where there is one: workers fork from a clean process that has the conversion
    modules imported, not from this one (which may run a progress-bar thread)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["accelify.pipeline", "accelify.codemods.engine.transform", "accelify.notebook"])
        return context
    return multiprocessing.get_context("spawn")


def start_workers_early() -> None:
    """Start the fork server now, so that it imports the conversion modules while the tree is walked
    (about half a second that would otherwise come before the first result)."""
    if _context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def run(jobs: Sequence[Job], workers: int) -> Iterator[tuple[Job, list[Result]]]:
    """Each job with its results, as soon as it is done (completion order). At most ``4 * workers``
    jobs are in flight, so results never pile up in memory."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield job, convert_job(job)
        return
    pool = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=_context(), initializer=_ignore_sigint)
    pending: dict[Future[list[Result]], Job] = {}
    queue = iter(jobs)
    try:
        for job in queue:
            pending[pool.submit(convert_job, job)] = job
            if len(pending) >= 4 * workers:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                job = pending.pop(future)
                for more in queue:
                    pending[pool.submit(convert_job, more)] = more
                    break
                yield job, _outcome(future, job)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _outcome(future: Future[list[Result]], job: Job) -> list[Result]:
    """A job's results; a worker that died (killed, out of memory) fails its scripts, not the run."""
    try:
        return future.result()
    except Exception as error:  # BrokenProcessPool, an unpicklable result...
        return [Result(t.path, FAILED, "", "", error=f"{t.path}: the worker converting it failed: "
                       f"{type(error).__name__}: {error}") for t in job.tasks]


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
