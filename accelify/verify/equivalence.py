"""The one-process checks: the original and the converted script, seeded alike, train the same way.

Both ran under the same recorder with the same seed and the same step limit, so the golden rule of the conversion
(on one process the converted script computes exactly what the original computed) becomes four checks:
the original runs, the conversion runs, every loss handed to ``backward`` is the same, and every parameter after
every optimizer step is the same (``torch.allclose`` with the reported tolerances).
"""

from __future__ import annotations

import math

from accelify.verify.compare import allclose, step_difference, waiting_at
from accelify.verify.exactness import frozen_optimizer
from accelify.verify.records import Backward, ProcessRecord
from accelify.verify.report import FAILED, PASSED, SKIPPED, CheckResult, VerifyOptions
from accelify.verify.runner import RunOutcome

STAGE = "1 process"


def skipped_one_process_checks(reason: str) -> list[CheckResult]:
    """The four checks, skipped for ``reason`` (nothing was converted, or the conversion failed)."""
    names = ("original runs", "converted runs", "same losses", "same parameters")
    return [CheckResult(name, STAGE, SKIPPED, reason) for name in names]


def one_process_checks(original: RunOutcome, converted: RunOutcome, options: VerifyOptions) -> list[CheckResult]:
    """Compare the original's and the conversion's one-process runs (see the module docstring)."""
    checks = [_runs("original", original, options), _runs("converted", converted, options)]
    if checks[0].failed or checks[1].failed:
        reason = "needs both scripts to run on one process"
        return checks + [CheckResult("same losses", STAGE, SKIPPED, reason),
                         CheckResult("same parameters", STAGE, SKIPPED, reason)]
    first, second = original.records[0], converted.records[0]
    return checks + [_same_losses(first, second, options), _same_parameters(first, second, options)]


def _runs(label: str, run: RunOutcome, options: VerifyOptions) -> CheckResult:
    name = f"{label} runs"
    script = "the original" if label == "original" else "the converted script"
    record = run.records[0] if run.records else None
    backwards = len(record.backwards) if record else 0
    steps = len(record.steps) if record else 0
    if run.timed_out:
        where = waiting_at(record.stack, run.spec.folder) if record else None
        at = f" (it was at {where})" if where else ""
        stacks = ((0, record.stack),) if record and record.stack else ()
        if not backwards:
            return CheckResult(name, STAGE, FAILED, f"{script} never called backward within {options.timeout:g} s{at}",
                               "verify compares training steps: a script that does not reach loss.backward() in time "
                               "cannot be verified (raise --timeout, or pass arguments that make it train sooner)",
                               stacks)
        return CheckResult(name, STAGE, FAILED,
                           f"{script} was still running after {options.timeout:g} s ({steps} optimizer steps){at}",
                           "raise --timeout, or lower --steps", stacks)
    if run.exit_code != 0:
        error = _error(record, run.stderr[0] if run.stderr else "")
        meaning = ("verify compares the conversion with the original: make the original run first (same arguments, "
                   "one CPU process)") if label == "original" else "the conversion breaks the script on one process"
        return CheckResult(name, STAGE, FAILED, f"{script} failed (exit {run.exit_code}): {error}", meaning)
    if record is None:
        return CheckResult(name, STAGE, FAILED, f"{script} ran but recorded nothing",
                           "the verify startup hook did not run in the script's process (a sitecustomize that fails "
                           "first, or PYTHONPATH replaced by the script?)")
    if record.hook_errors:
        return CheckResult(name, STAGE, FAILED, f"the verify hook failed in {script}: {record.hook_errors[0]}",
                           "nothing was recorded; please report this with the script")
    if not backwards:
        return CheckResult(name, STAGE, FAILED, f"{script} finished without calling backward",
                           "nothing trains, so there is nothing to compare: verify needs a script that calls "
                           "loss.backward()")
    how = record.ending
    return CheckResult(name, STAGE, PASSED, f"{steps} steps, {backwards} backward calls, {how} ({run.seconds:.1f} s)")


def _error(record: ProcessRecord | None, stderr: str) -> str:
    if record is not None and record.error:
        return record.error
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no error message"


def _same_losses(original: ProcessRecord, converted: ProcessRecord, options: VerifyOptions) -> CheckResult:
    name = "same losses"
    tolerance = f"rtol {options.rtol:g}, atol {options.atol:g}"
    pairs = list(zip(original.backwards, converted.backwards))
    for index, (mine, theirs) in enumerate(pairs):
        if mine.loss is None or theirs.loss is None:
            continue
        if not allclose([theirs.loss], [mine.loss], options.rtol, options.atol):
            detail = (f"backward {mine.n}: the converted script's loss is {theirs.loss:.6g}, the original's "
                      f"{mine.loss:.6g} ({tolerance})")
            frozen = frozen_optimizer(converted.steps, original.steps)
            meaning = "in the converted script " + frozen if frozen else _loss_meaning(pairs[index:] if index == 0 else [])
            return CheckResult(name, STAGE, FAILED, detail, meaning)
    if len(original.backwards) != len(converted.backwards):
        detail = (f"the converted script called backward {len(converted.backwards)} times, the original "
                  f"{len(original.backwards)}")
        return CheckResult(name, STAGE, FAILED, detail, "the conversion changed how often the script computes a "
                                                        "loss before the same number of optimizer steps")
    compared = sum(1 for a, b in pairs if a.loss is not None and b.loss is not None)
    return CheckResult(name, STAGE, PASSED, f"{compared} losses equal ({tolerance})")


def _loss_meaning(pairs: list[tuple[Backward, Backward]]) -> str:
    """Why the losses differ, in words: a constant ratio from the first backward on is a scaling of the loss."""
    ratios = [b.loss / a.loss for a, b in pairs[:4]
              if a.loss and b.loss is not None and math.isfinite(a.loss) and math.isfinite(b.loss)]
    if len(ratios) >= 2 and all(abs(r - ratios[0]) <= 1e-3 * abs(ratios[0]) for r in ratios) and abs(ratios[0] - 1) > 1e-3:
        return (f"the conversion scales the loss handed to backward by {ratios[0]:.4g}: it is divided differently "
                "than in the original (accelerator.backward already divides by gradient_accumulation_steps), so "
                "the gradients and every update differ")
    return ("on one process the converted script computes different losses from the original with the same seed: "
            "it does not train like the original")


def _same_parameters(original: ProcessRecord, converted: ProcessRecord, options: VerifyOptions) -> CheckResult:
    name = "same parameters"
    tolerance = f"rtol {options.rtol:g}, atol {options.atol:g}"
    for mine, theirs in zip(original.steps, converted.steps):
        if mine.optimizer != theirs.optimizer:
            return CheckResult(name, STAGE, FAILED, f"step {mine.n} is taken by optimizer {theirs.optimizer} in the "
                                                    f"converted script, by optimizer {mine.optimizer} in the original",
                               "the conversion changed the order in which the optimizers step")
        difference = step_difference(theirs, mine, options.rtol, options.atol)
        if difference is not None:
            detail = (f"after step {mine.n} (optimizer {mine.optimizer}), {difference.what} differs from the "
                      f"original's {difference.how} ({tolerance})")
            frozen = frozen_optimizer(converted.steps, original.steps)
            return CheckResult(name, STAGE, FAILED, detail,
                               "in the converted script " + frozen if frozen else
                               "on one process the converted script updates the weights differently from the "
                               "original (the optimizer, the learning rate, clipping or the gradients changed)")
    if len(original.steps) != len(converted.steps):
        detail = f"the converted script took {len(converted.steps)} optimizer steps, the original {len(original.steps)}"
        return CheckResult(name, STAGE, FAILED, detail, "the conversion changed when or how often the optimizer steps")
    if not original.steps:
        return CheckResult(name, STAGE, SKIPPED, "neither script took a torch.optim optimizer step (a hand-written "
                                                 "update?): only the losses were compared")
    values = sum(len(p.values) for step in original.steps for p in step.params)
    return CheckResult(name, STAGE, PASSED,
                       f"{values} values equal over {len(original.steps)} steps ({tolerance})")

