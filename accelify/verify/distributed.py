"""The N-process checks: the converted script, launched on N CPU processes, trains as data-parallel.

From each process's record: the run finished in time (a hang is named by where each process waits), every process
joined one process group of N, every trained parameter sits in a DistributedDataParallel wrapper (or is sharded by
FSDP) whose forward ran, every loader that fed a backward gives each process about 1/N of the samples the
one-process run drew per epoch, every loss is finite, and after the last step every process holds the same
parameters.
"""

from __future__ import annotations

import math

from accelify.verify.compare import step_difference, waiting_at
from accelify.verify.records import Loader, ProcessRecord
from accelify.verify.report import FAILED, PASSED, SKIPPED, CheckResult, VerifyOptions
from accelify.verify.runner import RunOutcome

NAMES = ("finished in time", "one process group", "model wrapped", "data sharded", "finite losses",
         "parameters agree")


def skipped_distributed_checks(reason: str, processes: int) -> list[CheckResult]:
    """Every N-process check, skipped for ``reason``."""
    return [CheckResult(name, _stage(processes), SKIPPED, reason) for name in NAMES]


def distributed_checks(run: RunOutcome, reference: RunOutcome | None, options: VerifyOptions) -> list[CheckResult]:
    """Judge the N-process run; ``reference`` is the conversion's one-process run (for the sharding check)."""
    n = options.processes
    records = {r.rank: r for r in run.records}
    ordered = [records.get(rank) for rank in range(n)]
    present = [r for r in ordered if r is not None]
    checks = [_finished(run, ordered, options)]
    if not present:
        return checks + [CheckResult(name, _stage(n), SKIPPED, "no process recorded anything") for name in NAMES[1:]]
    one = reference.records[0] if reference is not None and reference.ok and reference.records else None
    checks += [_group(ordered, n), _wrapped(present, n), _sharded(present, one, n), _finite(present, n),
               _agree(present, n, options)]
    return checks


def _stage(n: int) -> str:
    return f"{n} processes"


def _finished(run: RunOutcome, ordered: list[ProcessRecord | None], options: VerifyOptions) -> CheckResult:
    stage, name = _stage(options.processes), NAMES[0]
    if run.timed_out:
        places = []
        for rank, record in enumerate(ordered):
            where = waiting_at(record.stack, run.spec.folder) if record is not None else None
            places.append(f"process {rank} waits at {where}" if where else f"process {rank}: no stack")
        stacks = tuple((r.rank, r.stack) for r in ordered if r is not None and r.stack)
        return CheckResult(name, stage, FAILED,
                           f"the run did not finish within {options.timeout:g} s: " + "; ".join(places),
                           "a hang: the processes wait for each other at different places, typically a collective "
                           "(wait_for_everyone, gather, reduce, a save) in a branch that not every process takes, "
                           "such as a test on a local loss or metric; every process was ended", stacks)
    if run.exit_code != 0:
        failed = [(rank, r) for rank, r in enumerate(ordered) if r is None or not r.finished]
        described = []
        for rank, record in failed or list(enumerate(ordered)):
            error = record.error if record is not None and record.error else _last_line(run.stderr, rank)
            described.append(f"process {rank}: {error}")
        return CheckResult(name, stage, FAILED, f"the run failed (exit {run.exit_code}): " + "; ".join(described),
                           f"the converted script fails on {options.processes} processes")
    steps = [len(r.steps) for r in ordered if r is not None]
    stopped = [r for r in ordered if r is not None and r.stopped]
    how = stopped[0].ending if stopped and len(stopped) == len(ordered) else "ran to the end"
    return CheckResult(name, stage, PASSED, f"{how} after {max(steps, default=0)} steps ({run.seconds:.1f} s)")


def _last_line(stderr: tuple[str, ...], rank: int) -> str:
    text = stderr[rank] if rank < len(stderr) else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "stopped without a message (ended by the launcher after another process failed?)"


def _group(ordered: list[ProcessRecord | None], n: int) -> CheckResult:
    stage, name = _stage(n), NAMES[1]
    ranks = []
    for rank, record in enumerate(ordered):
        if record is None:
            return CheckResult(name, stage, FAILED, f"process {rank} recorded nothing",
                               f"only {sum(r is not None for r in ordered)} of {n} processes ran the script")
        group = record.group
        if group is None:
            return CheckResult(name, stage, FAILED, f"process {rank} called no backward",
                               "nothing shows which process group it trained in")
        if not group.initialized:
            return CheckResult(name, stage, FAILED, f"process {rank} never joined a process group",
                               f"each of the {n} processes trained alone on its own copy: the script does not join "
                               "the group the launcher set up (is it converted, and does it create the Accelerator?)")
        if group.world_size != n:
            return CheckResult(name, stage, FAILED, f"process {rank} joined a group of {group.world_size}, not {n}",
                               "the processes did not train together")
        ranks.append(group.rank)
    if sorted(ranks) != list(range(n)):
        return CheckResult(name, stage, FAILED, f"the processes have ranks {ranks}",
                           "two processes took the same rank: they did not form one group")
    first = ordered[0].group if ordered[0] is not None else None
    backend = first.backend if first is not None else "?"
    return CheckResult(name, stage, PASSED, f"ranks 0-{n - 1} of {n}, backend {backend}")


def _wrapped(records: list[ProcessRecord], n: int) -> CheckResult:
    stage, name = _stage(n), NAMES[2]
    calls = 0
    for record in records:
        for step in record.steps:
            trained = [p for p in step.params if p.grad]
            outside = [p for p in trained if p.wrapper is None]
            if outside and len(outside) == len(trained):
                return CheckResult(name, stage, FAILED,
                                   f"process {record.rank} never wrapped the model: optimizer {step.optimizer}'s "
                                   f"{len(trained)} trained parameters are outside any DistributedDataParallel",
                                   f"the {n} processes trained independent copies: their gradients are never "
                                   "averaged (prepare the model with accelerator.prepare)")
            if outside:
                return CheckResult(name, stage, FAILED,
                                   f"process {record.rank} left {len(outside)} of {len(trained)} trained parameters "
                                   f"of optimizer {step.optimizer} outside any DistributedDataParallel",
                                   "those parameters train as independent copies on each process")
            used = {p.wrapper for p in trained if isinstance(p.wrapper, int)}
            for wrapper in step.wrappers:
                if wrapper.index in used and wrapper.forward_calls == 0:
                    return CheckResult(name, stage, FAILED,
                                       f"process {record.rank} wrapped {wrapper.module} in DistributedDataParallel "
                                       "but never ran the wrapper's forward",
                                       "calling the inner module (model.module(x)) bypasses DDP: gradients are not "
                                       "averaged, the processes train independent copies")
        if record.steps:
            calls += sum(w.forward_calls for w in record.steps[-1].wrappers)
    if not any(record.steps for record in records):
        return CheckResult(name, stage, SKIPPED, "no torch.optim optimizer step was recorded: which parameters "
                                                 "train is unknown (a hand-written update?)")
    return CheckResult(name, stage, PASSED, f"every trained parameter in DDP (or FSDP); {calls} forward calls "
                                            "through the wrappers")


def _samples(loader: Loader) -> int | None:
    """Samples per epoch for one process: batches per epoch (its length, else a finished epoch) x batch size."""
    batches = loader.length if loader.length is not None else (loader.epoch_draws[0] if loader.epoch_draws else None)
    if batches is None or loader.batch is None:
        return None
    return batches * loader.batch


def _sharded(records: list[ProcessRecord], one: ProcessRecord | None, n: int) -> CheckResult:
    stage, name = _stage(n), NAMES[3]
    if one is None:
        return CheckResult(name, stage, SKIPPED, "the conversion's one-process run, the reference, did not finish")
    judged: list[str] = []
    unknown: list[str] = []
    few: list[tuple[str, int]] = []
    for record in records:
        for key, loader in record.loaders.items():
            if not loader.training:
                continue
            reference = one.loaders.get(key)
            mine, alone = _samples(loader), _samples(reference) if reference is not None else None
            if mine is None or alone is None:
                unknown.append(loader.site)
                continue
            if alone // reference.batch < n:  # type: ignore[union-attr, operator]
                # fewer batches than processes: every process takes one batch, sharded or not (a padded one may even
                # be larger than the one process's short batch: 256 rows against 205)
                few.append((loader.site, alone // reference.batch))  # type: ignore[union-attr, operator]
                continue
            # sharded, each process walks at most ceil(B / n) of the B batches one process walks (the runtime pads the
            # last round), or, split (verify's exact runs), ceil(b / n) rows of each of them: a one-batch slack passed a
            # loader of 2 batches walked whole on 2 processes (8 of 8 samples)
            batches, size = alone // reference.batch, reference.batch  # type: ignore[union-attr, operator]
            share = max(-(-batches // n) * size, batches * -(-size // n))
            if mine > share:
                return CheckResult(
                    name, stage, FAILED,
                    f"process {record.rank} drew {mine} samples per epoch from the loader iterated at {loader.site}, "
                    f"one process alone {alone}",
                    f"every process sees all the data: the {n} processes repeat the same epoch instead of sharing it "
                    "(prepare the loader with accelerator.prepare)")
            if record.rank == 0:
                judged.append(f"{loader.site}: {mine} of {alone} samples per epoch")
    if judged:
        return CheckResult(name, stage, PASSED, "; ".join(judged) + " (process 0)")
    if few:
        site, batches = few[0]
        return CheckResult(name, stage, SKIPPED, f"the loader iterated at {site} makes {batches} batch"
                                                 f"{'es' if batches != 1 else ''} per epoch, fewer than the {n} "
                                                 "processes: each process takes one batch whether or not it is "
                                                 "sharded, so its share cannot be measured (give verify more data)")
    if unknown:
        return CheckResult(name, stage, SKIPPED, f"the loader iterated at {unknown[0]} has no length and no epoch "
                                                 "ended within the steps: its share cannot be measured")
    return CheckResult(name, stage, SKIPPED, "no DataLoader yielded the batches that backward used: verify cannot "
                                             "tell whether each process sees its own data")


def _finite(records: list[ProcessRecord], n: int) -> CheckResult:
    stage, name = _stage(n), NAMES[4]
    count = 0
    for record in records:
        for backward in record.backwards:
            if backward.loss is None:
                continue
            count += 1
            if not math.isfinite(backward.loss):
                return CheckResult(name, stage, FAILED,
                                   f"process {record.rank}'s loss at backward {backward.n} is {backward.loss}",
                                   f"training diverges on {n} processes")
    if not count:
        return CheckResult(name, stage, SKIPPED, "no loss was recorded")
    return CheckResult(name, stage, PASSED, f"{count} losses, all finite")


def _agree(records: list[ProcessRecord], n: int, options: VerifyOptions) -> CheckResult:
    stage, name = _stage(n), NAMES[5]
    last = min(len(r.steps) for r in records)
    if last == 0 or len(records) < 2:
        return CheckResult(name, stage, SKIPPED, "fewer than two processes took an optimizer step")
    reference = records[0].steps[last - 1]
    if any(p.wrapper == "sharded" for p in reference.params):
        return CheckResult(name, stage, SKIPPED, "the parameters are sharded (FSDP): each process holds its own part")
    tolerance = f"rtol {options.rtol:g}, atol {options.atol:g}"
    for record in records[1:]:
        difference = step_difference(record.steps[last - 1], reference, options.rtol, options.atol)
        if difference is not None:
            return CheckResult(name, stage, FAILED,
                               f"after step {reference.n}, process {record.rank}'s {difference.what} differs from "
                               f"process {records[0].rank}'s {difference.how} ({tolerance})",
                               "the processes' models drifted apart: something changes the weights on one process "
                               "only (a random draw seeded per process, an update outside the optimizer, a model "
                               "that is not wrapped)")
    return CheckResult(name, stage, PASSED, f"equal on all {n} processes after step {reference.n} ({tolerance})")
