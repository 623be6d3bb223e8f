"""One pool for every run a test session makes of the corpus and of the planted wrong conversions.

``accelify verify`` of a corpus case runs three things: the original and the tool's conversion on one process, the
conversion on 2 Gloo processes through torch.distributed.run. The e2e tests need the same runs (same losses printed
on one process, rank 0 alone prints on two), so they read them from the verify report instead of running the
scripts again; only what verify does not run (the ``--target accelerate`` variant, the later runs of a multi-run
case, scripts the tool leaves unchanged) is run on its own, through the same pool.

Cost on two cores: a Python process spends ~2 s of CPU importing torch. One-process runs are forked from two fork
servers that imported torch once (``accelify.verify.forkserver``); a 2-process run costs three imports (torchrun's
agent and two workers). Two workers run everything; the jobs are queued once, when the session first asks, longest
first (the planted hang waits for its timeout).

Corpus cases are verified to the end of the script (no step limit), so that the e2e tests see everything the
script prints; planted cases use their own step limit and timeout (``case.toml``). A planted case's original is run
once for its wrong and its right conversion (``verify_files(original_run=...)``): the two verifications share it.
"""

from __future__ import annotations

import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Iterable, TypeVar

from corpus_cases import CORPUS, Case, PlantedCase

from accelify.verify import ForkServerLauncher, VerifyOptions, VerifyReport, verify_files
from accelify.verify.runner import RunOutcome
from accelify.verify.verification import run_original

T = TypeVar("T")
WORKERS = 2
CORPUS_TIMEOUT = 180.0  # per run; a corpus script's own work takes a few seconds at most


class VerificationPool:
    """Runs jobs on ``WORKERS`` threads that share ``WORKERS`` fork servers; each job runs once, on first request."""

    def __init__(self) -> None:
        self.launcher = ForkServerLauncher(servers=WORKERS)
        self._executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="verification")
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._originals = tempfile.TemporaryDirectory(prefix="accelify-planted-originals-")
        self._original_runs: dict[str, RunOutcome] = {}
        self._original_locks: dict[str, threading.Lock] = {}

    def submit(self, key: str, job: Callable[[], T]) -> "Future[T]":
        """Queue ``job`` under ``key`` unless it was queued already; its future."""
        with self._lock:
            if key not in self._futures:
                self._futures[key] = self._executor.submit(job)
            return self._futures[key]

    def start(self, corpus: Iterable[str] = (), planted: Iterable[str] = ()) -> None:
        """Start the fork servers here, in the caller's thread, then queue the verification of these cases (planted
        ones first: the hang is the longest wait). A server started later, from a worker thread, would be started
        while some test that may not start processes runs (the conftest's guard refuses it, for every thread)."""
        with ExitStack() as servers:
            for _ in range(WORKERS):
                servers.enter_context(self.launcher.borrow())
        for name in sorted(planted, key=lambda n: -PlantedCase.load(n).timeout):
            self.submit(f"planted/{name}", lambda n=name: self._planted(n))
        for name in corpus:
            self.submit(f"corpus/{name}", lambda n=name: self._corpus(n))

    def corpus(self, name: str) -> VerifyReport:
        """``accelify verify`` of corpus case ``name`` (the tool's conversion, 2 processes, run to the end)."""
        return self.submit(f"corpus/{name}", lambda: self._corpus(name)).result()

    def planted(self, name: str) -> VerifyReport:
        """``accelify verify`` of planted case ``name`` (its ``converted.py`` against its ``original.py``)."""
        return self.submit(f"planted/{name}", lambda: self._planted(name)).result()

    def planted_right(self, name: str) -> VerifyReport:
        """``accelify verify`` of planted case ``name``'s right conversion (its ``right.py``)."""
        return self.submit(f"planted-right/{name}", lambda: self._planted(name, right=True)).result()

    def _corpus(self, name: str) -> VerifyReport:
        case = Case.load(CORPUS / name)
        options = VerifyOptions(steps=0, processes=2, timeout=CORPUS_TIMEOUT, args=case.runs[0])
        return verify_files(case.files(), options=options, launcher=self.launcher, concurrent=False,
                            label=f"corpus/{name}/input.py")

    def _planted(self, name: str, right: bool = False) -> VerifyReport:
        case = PlantedCase.load(name)
        options = VerifyOptions(steps=case.steps, processes=2, timeout=case.timeout, batches=case.batches,
                                epochs=case.epochs)
        converted = case.right() if right else case.converted()
        assert converted is not None, f"planted/{name} has no right.py"
        script = "right.py" if right else "converted.py"
        return verify_files(case.original(), converted, options=options, launcher=self.launcher,
                            concurrent=False, label=f"planted/{name}", converted_label=f"planted/{name}/{script}",
                            original_run=self._original(name, case, options))

    def _original(self, name: str, case: PlantedCase, options: VerifyOptions) -> RunOutcome:
        """Planted case ``name``'s original, run once for its wrong and its right conversion (the first caller runs
        it, in its own thread; its files stay until :meth:`close`)."""
        with self._lock:
            lock = self._original_locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._original_runs:
                self._original_runs[name] = run_original(Path(self._originals.name) / name, case.original(),
                                                         options, self.launcher)
            return self._original_runs[name]

    def close(self) -> None:
        """Cancel what has not started, wait for what has, stop the fork servers."""
        with self._lock:
            for future in self._futures.values():
                future.cancel()
        self._executor.shutdown(wait=True)
        self.launcher.close()
        self._originals.cleanup()
