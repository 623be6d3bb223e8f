"""``verify_script`` / ``verify_files``: convert, run, check, and return a frozen :class:`VerifyReport`.

The order of work: convert (unless a conversion is given); run the original and the conversion on one process each
and the conversion on N processes in exact mode (they share the original's batches), all three at once; turn the
records into checks: one process against the original, the N processes among themselves, and the N processes
against the original step by step (``exactness``), and what process 0 printed after each epoch against what the
original printed, logged and returned (``printed``). Where exact mode cannot run the script (it sizes state by the
full batch, ``fallback``), the conversion runs again on N processes as a real launch runs it, and that run is judged
by the non-exact checks; a script that tests its batches' size (``size_tests``) runs that way from the start. Each run has its own folder in a
temporary working directory that is removed at the end; the report keeps what each process printed.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from accelify.verify.deadlocks import deadlock_check
from accelify.verify.distributed import distributed_checks, skipped_distributed_checks
from accelify.verify.equivalence import one_process_checks, skipped_one_process_checks
from accelify.verify.exactness import exact_checks, skipped_exact_checks
from accelify.verify.fallback import exact_blocked
from accelify.verify.printed import skipped_value_checks, value_checks
from accelify.verify.report import FAILED, PASSED, SKIPPED, CheckResult, RunSummary, VerifyOptions, VerifyReport
from accelify.verify.runner import Launcher, RunOutcome, RunSpec
from accelify.verify.batch_membership import explain as explain_membership
from accelify.verify.batch_membership import membership_losses
from accelify.verify.size_tests import explain, size_tests
from accelify.verify.workspace import ScriptFiles, as_program, convert_files, stage

CONVERT_STAGE = "convert"
START_POLL = 0.05  # seconds between two looks for the original's record, before the N-process run starts


def verify_script(
    script: str | Path,
    *,
    converted: str | Path | None = None,
    options: VerifyOptions = VerifyOptions(),
    launcher: Launcher | None = None,
) -> VerifyReport:
    """Verify the conversion of ``script`` (the tool's, or the file ``converted``); the scripts' local modules
    (the other ``.py`` files and packages of their folders) go with them.

    >>> report = verify_script("train.py", options=VerifyOptions(steps=3))  # doctest: +SKIP
    >>> report.passed, report.verdict  # doctest: +SKIP
    (True, 'verified: the conversion trains like the original on one process and as data-parallel on 2 processes')
    """
    original = ScriptFiles.from_path(script)
    given = ScriptFiles.from_path(converted) if converted is not None else None
    return verify_files(original, given, options=options, launcher=launcher, label=str(script),
                        converted_label=str(converted) if converted is not None else None)


def verify_files(
    original: ScriptFiles,
    converted: ScriptFiles | None = None,
    *,
    options: VerifyOptions = VerifyOptions(),
    launcher: Launcher | None = None,
    concurrent: bool = True,
    label: str | None = None,
    converted_label: str | None = None,
    original_run: RunOutcome | None = None,
) -> VerifyReport:
    """Verify ``converted`` (default: the tool's conversion of ``original``) against ``original``.

    ``launcher`` starts the runs (default: fresh processes, as a user would start them; tests pass a
    :class:`~accelify.verify.runner.ForkServerLauncher`); ``concurrent`` runs the three runs at once.
    ``original_run``: :func:`run_original`'s run of ``original`` with the same ``options``, whose files still exist,
    used instead of running the original again (a test session verifying several conversions of one script).
    """
    start = time.monotonic()
    own_launcher = launcher is None
    launcher = launcher or Launcher()
    checks: list[CheckResult] = []
    runs: list[RunOutcome] = []
    try:
        if converted is None:
            converted, result = convert_files(original)
            source, status = "accelify convert", result.status
            conversion = _conversion_check(result.status, result.error or result.reason, len(result.changes),
                                           [w.format() for w in result.warnings])
        else:
            source, status = converted_label or converted.name, "given"
            conversion = CheckResult("conversion", CONVERT_STAGE, PASSED, f"the converted script was given: {source}")
        checks.append(conversion)
        if conversion.status == PASSED:
            original, converted = as_program(original), as_program(converted)  # a notebook runs as its cells
            checks.append(deadlock_check(converted, CONVERT_STAGE))
        if conversion.status != PASSED:
            reason = "nothing was converted" if conversion.status == SKIPPED else "the conversion failed"
            checks += skipped_one_process_checks(reason)
            checks += skipped_distributed_checks(reason, options.processes)
            checks += skipped_exact_checks(reason, options.processes)
            checks += skipped_value_checks(reason, options.processes)
        else:
            sized = size_tests(converted)  # a batch-size test sees a share of each batch in exact mode: a real launch
            mixed = [] if sized else membership_losses(converted)  # so does a loss mined within a batch
            with tempfile.TemporaryDirectory(prefix="accelify-verify-") as workdir:
                runs = _run_all(Path(workdir), original, converted, options, launcher, concurrent, original_run,
                                exact=not (sized or mixed))
                first, second, distributed = runs  # judged while the files exist: a hang names their lines
                blocked = (explain(sized, options.processes) if sized else explain_membership(mixed, options.processes)
                           if mixed else exact_blocked(distributed, second))
                if blocked is not None and not (sized or mixed):  # it sizes state by the full batch: a real launch
                    distributed = _run_normal(Path(workdir), converted, distributed.spec, launcher)
                    runs[2] = distributed
                checks += one_process_checks(first, second, options)
                checks += distributed_checks(distributed, second, options)
                if blocked is not None:
                    checks += skipped_exact_checks(blocked, options.processes)
                    checks += skipped_value_checks(blocked, options.processes)
                else:
                    checks += exact_checks(distributed, first, options)
                    checks += value_checks(distributed, first, second, options.processes)
    finally:
        if own_launcher:
            launcher.close()
    return VerifyReport(
        script=label or original.name, converted=source, conversion=status, options=options, checks=tuple(checks),
        runs=tuple(_summary(run) for run in runs), seconds=time.monotonic() - start,
    )


def _conversion_check(status: str, why: str | None, changes: int, warnings: list[str]) -> CheckResult:
    noted = f"; {len(warnings)} warning{'s' if len(warnings) != 1 else ''}: " + "; ".join(warnings) if warnings else ""
    if status == "converted":
        return CheckResult("conversion", CONVERT_STAGE, PASSED, f"converted ({changes} changes){noted}")
    if status == "failed":
        return CheckResult("conversion", CONVERT_STAGE, FAILED, f"the conversion failed: {why}",
                           "nothing to verify: the tool could not convert the script")
    reason = f" ({why})" if why else ""
    what = {"skipped": "the tool skipped the script",
            "attention": "the tool refused to convert the script (it needs attention)"}.get(
        status, "the conversion left the script unchanged")
    return CheckResult("conversion", CONVERT_STAGE, SKIPPED, f"{what}{reason}{noted}")


def run_original(workdir: Path, original: ScriptFiles, options: VerifyOptions, launcher: Launcher) -> RunOutcome:
    """The original's one-process run, as :func:`verify_files` makes it, in ``workdir`` (its files stay there)."""
    return launcher.run(_spec(workdir, "original", as_program(original), 1, options))


def _spec(workdir: Path, label: str, files: ScriptFiles, processes: int, options: VerifyOptions,
          reference: Path | None = None, exact: bool = True) -> RunSpec:
    """A run of ``files`` on ``processes`` (above 1 and ``exact``: exact mode, reading the original's losses from
    ``reference``)."""
    exact = exact and processes > 1
    return RunSpec(label=label, folder=stage(files, workdir / label), target=files.name, logs=workdir / "logs" / label,
                   args=options.args, processes=processes, steps=options.steps, batches=options.batches,
                   epochs=options.epochs, seed=options.seed,
                   timeout=options.timeout, exact=exact, reference=reference if exact else None)


def _run_all(workdir: Path, original: ScriptFiles, converted: ScriptFiles, options: VerifyOptions,
             launcher: Launcher, concurrent: bool, original_run: RunOutcome | None = None, exact: bool = True
             ) -> list[RunOutcome]:
    """The three runs: original and conversion on one process, conversion on N, in exact mode unless ``exact`` is
    False (the original's run is ``original_run`` where one is given).

    ``concurrent``: all three at once. The N-process run reads the original's losses from its record as the original
    writes them (``hook/accelify_verify_reference.py``, which waits for the record to appear); with a launcher that
    queues runs (a few fork servers) it starts once the original's record exists, so that it never holds the server
    the original waits for; with one that starts every run at once, right away (under load the original's record
    took seconds to appear, and the N-process run is the longest). It spends much of its time waiting for its peers
    at each step's all-reduce, time the one-process runs fill. One after the other otherwise (the original first)."""
    first_spec = original_run.spec if original_run is not None else _spec(workdir, "original", original, 1, options)
    specs = [first_spec, _spec(workdir, "converted", converted, 1, options),
             _spec(workdir, "distributed", converted, options.processes, options, first_spec.record_prefix, exact)]
    if original_run is not None:
        if not concurrent:
            return [original_run, *(launcher.run(spec) for spec in specs[1:])]
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="accelify-verify") as pool:
            try:
                return [original_run, *pool.map(launcher.run, specs[1:])]
            except BaseException:
                launcher.stop_all()
                raise
    if not concurrent:
        return [launcher.run(spec) for spec in specs]
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="accelify-verify") as pool:
        try:
            first = pool.submit(launcher.run, specs[0])
            second = pool.submit(launcher.run, specs[1])
            if launcher.queues:
                _started(specs[0], first)
            third = pool.submit(launcher.run, specs[2])
            return [first.result(), second.result(), third.result()]
        except BaseException:  # Ctrl-C or a termination reaches this thread only: end the runs the others wait on
            launcher.stop_all()
            raise


def _started(spec: RunSpec, run: "Future[RunOutcome]") -> None:
    """Wait until ``spec``'s process has begun its record, or its run has ended (a launcher with fewer free
    processes than runs starts the original first, so the N-process run never waits for a run queued behind it)."""
    while not run.done() and not any(spec.logs.glob(spec.record_prefix.name + ".rank0.pid*.jsonl")):
        time.sleep(START_POLL)


def _run_normal(workdir: Path, converted: ScriptFiles, exact: RunSpec, launcher: Launcher) -> RunOutcome:
    """The conversion on N processes as a real launch runs it (whole batches per process, not exact mode)."""
    folder = stage(converted, workdir / "distributed-normal")
    return launcher.run(dataclasses.replace(exact, folder=folder, logs=workdir / "logs" / "distributed-normal",
                                            exact=False, reference=None))


def _summary(run: RunOutcome) -> RunSummary:
    return RunSummary(
        label=run.spec.label, processes=run.spec.processes, exit_code=run.exit_code, timed_out=run.timed_out,
        seconds=run.seconds, steps=tuple(len(r.steps) for r in run.records),
        backwards=tuple(len(r.backwards) for r in run.records), stdout=run.stdout, stderr=run.stderr,
    )
