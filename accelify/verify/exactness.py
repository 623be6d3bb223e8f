"""The exact checks: the converted script on N processes, in exact mode, trains step by step as the original on one.

In exact mode (``hook/accelify_verify_exact.py``) the N processes share each of the original's batches, so they must
take the original's optimizer steps with the original's learning rates and parameters. From the original's
one-process record and every process's record of the N-process run, four checks:

``same data``        every process drew the same whole batches (a data set drawn without a seed differs per process)
``same schedule``    as many steps per optimizer as the original, the same learning rate of every param group after
                     every step, and no prepared scheduler stepped once per epoch (it moves N steps per call in a
                     real launch, though exact mode moves it one)
``parameters train`` every optimizer whose parameters moved in the original moves them on N processes
``same as original`` after every step process 0's parameters equal the original's, up to the first step exact mode
                     marked inexact (a batch that does not split evenly, dropout on a tensor that is not batch-first,
                     a mean loss with class weights or ignored targets): what follows it legitimately differs

Without a prepared DataLoader (batches drawn by hand, episodes of an environment) the processes do not share the
original's batches: the step counts, learning rates and parameters are not compared (skipped, saying so).

Tolerance: N processes sum gradients in another order than one process, and float differences grow with each step.
Steps up to ``HORIZON`` are compared with ``rtol 1e-4, atol 1e-6``; after it both grow by a factor 2 every
``HORIZON`` steps, to at most ``1e-2``/``1e-4``, and parameters are compared for the first ``COMPARED_STEPS`` steps
only (Adam turns a float difference in a near-zero gradient into a full step: after some hundred steps two exact
runs differ by more than any fixed tolerance). A wrong conversion differs at its first affected step by far more;
learning rates and step counts are compared to the end.

Float32 rounding of a gradient: two runs whose parameters are bit-equal round alike, but once the parameters differ
in their last bits (any step after the first) the rounding of each gradient decorrelates, and a float32 gradient
summed over many large terms of both signs carries rounding of up to ~1e-3 of its size (a ResNet18 with BatchNorm
after a warm-up step, pytorch-cifar100: float32 against float64 1e-3, one process against two 0.5 % at step 3 and
1.6 % at step 4, while the same runs in float64 agree to 1e-14). Elementwise, a small value of a parameter then
differs by more than ``rtol``/``atol``. Such a difference is excused when what the step added to it (process 0's
difference after the step less its difference before) is at most ``ROUNDING_SHARE`` of the original's own update in
that step, in L2 over the parameter: a wrong conversion changes the update itself (1/N of it, other data, a whole
step, no training), and the first step of every optimizer, which has no update before it to measure, is never excused.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from accelify.verify.compare import allclose, max_difference
from accelify.verify.records import Parameter, ProcessRecord, Step
from accelify.verify.report import FAILED, PASSED, SKIPPED, CheckResult, VerifyOptions
from accelify.verify.runner import RunOutcome

NAMES = ("same data", "same schedule", "parameters train", "same as original")
HORIZON = 8
COMPARED_STEPS = 64  # parameters are compared for this many steps; learning rates and step counts to the end
RTOL, ATOL, MAX_GROWTH = 1e-4, 1e-6, 100.0
LR_RTOL = 1e-6
NOT_SHARED = ("no prepared DataLoader fed the processes: they do not share the original's batches, so their steps "
               "are not the original's (each process draws its own batches)")


def skipped_exact_checks(reason: str, processes: int) -> list[CheckResult]:
    """Every exact check, skipped for ``reason``."""
    return [CheckResult(name, _stage(processes), SKIPPED, reason) for name in NAMES]


def exact_checks(run: RunOutcome, original: RunOutcome, options: VerifyOptions) -> list[CheckResult]:
    """Compare the exact N-process run with the original's one-process run (see the module docstring)."""
    n = options.processes
    if not original.ok or not original.records:
        return skipped_exact_checks("the original's one-process run, the reference, did not finish", n)
    if not run.ok or len(run.records) < n:
        return skipped_exact_checks(f"the run on {n} processes did not finish", n)
    reference = original.records[0]
    records = sorted(run.records, key=lambda r: r.rank)
    return [_same_data(records, n), _same_schedule(records[0], reference, n), _parameters_train(records[0], reference, n),
            _same_as_original(records[0], reference, n)]


def _stage(n: int) -> str:
    return f"{n} processes"


def _same_data(records: list[ProcessRecord], n: int) -> CheckResult:
    name, stage = NAMES[0], _stage(n)
    first = {(b.loader, b.epoch, b.index): b.total for b in records[0].batches}
    if not first:
        return CheckResult(name, stage, SKIPPED, "no prepared DataLoader yielded a batch: verify cannot compare "
                                                 "the processes' data")
    for record in records[1:]:
        for mark in record.batches:
            mine = first.get((mark.loader, mark.epoch, mark.index))
            if mine is not None and not allclose([mark.total], [mine], 1e-6, 1e-6):
                ordinal = "first" if mark.loader == 0 else f"number {mark.loader + 1}"
                return CheckResult(
                    name, stage, FAILED,
                    f"batch {mark.index + 1} of epoch {mark.epoch + 1} from the loader prepared {ordinal} differs "
                    f"between process 0 and process {record.rank} (sums {mine:.6g} and {mark.total:.6g})",
                    "each process made its own data: a value drawn before the script seeds its generators (a "
                    "data set made with torch.randn, a random split or target) differs per process, so the "
                    f"{n} processes solve different problems; seed them alike before drawing it (set_seed(seed) "
                    "from accelify.runtime, or torch.manual_seed on every process)")
    return CheckResult(name, stage, PASSED, f"{len(first)} batches equal on all {n} processes")


def per_epoch_scheduler(record: ProcessRecord) -> tuple[str, int, int] | None:
    """(name, calls, optimizer steps) of a prepared scheduler stepped once per pass over the data: an epoch ended
    and more than one optimizer step was taken before each of its calls."""
    calls: dict[str | None, list[tuple[int, int]]] = {}
    for call in record.schedulers:
        calls.setdefault(call.name, []).append((call.steps, call.epochs))
    for name, seen in calls.items():
        before = [(0, 0)] + seen
        gaps = [(s2 - s1, e2 - e1) for (s1, e1), (s2, e2) in zip(before, seen)]
        if gaps and all(steps > 1 and epochs >= 1 for steps, epochs in gaps):
            return name or "the scheduler", len(seen), seen[-1][0]
    return None


def _same_schedule(mine: ProcessRecord, reference: ProcessRecord, n: int) -> CheckResult:
    name, stage = NAMES[1], _stage(n)
    late = per_epoch_scheduler(mine)
    if late is not None:
        scheduler, calls, steps = late
        return CheckResult(
            name, stage, FAILED,
            f"the prepared scheduler `{scheduler}` was stepped {calls} times in {steps} optimizer steps, once per "
            "epoch",
            f"the scheduler moved {n} steps per call: it is stepped once per epoch, and a prepared scheduler moves "
            f"num_processes steps each call, so on {n} processes it decays {n}x too fast; do not prepare it "
            "(leave it out of accelerator.prepare)")
    if not mine.batches:
        return CheckResult(name, stage, SKIPPED, NOT_SHARED)
    counts, expected = Counter(s.optimizer for s in mine.steps), Counter(s.optimizer for s in reference.steps)
    if counts != expected:
        label = {s.optimizer: s.label for s in mine.steps + reference.steps}
        words = ", ".join(f"{label[k]} {counts.get(k, 0)} (original {expected.get(k, 0)})"
                          for k in sorted(set(counts) | set(expected)))
        return CheckResult(name, stage, FAILED, f"process 0 took other optimizer steps than the original: {words}",
                           "the conversion changes how often an optimizer steps over the same data (an early stop "
                           "or a loop bound decided on a value computed from one process's share of the data, "
                           "not reduced over the processes?)")
    for theirs, ours in zip(reference.steps, mine.steps):
        if theirs.optimizer != ours.optimizer:
            return CheckResult(name, stage, FAILED, f"step {ours.n} is taken by {ours.label}, by {theirs.label} in "
                                                    "the original", "the optimizers step in another order")
        if len(theirs.lrs) == len(ours.lrs) and not all(
                a is None or b is None or allclose([b], [a], LR_RTOL, 0.0) for a, b in zip(theirs.lrs, ours.lrs)):
            return CheckResult(
                name, stage, FAILED,
                f"after step {ours.n} the learning rates of {ours.label} are {_lrs(ours)}, the original's "
                f"{_lrs(theirs)}", "the learning-rate schedule differs from the original's: a scheduler steps "
                                   "more or less often, or the learning rate is scaled by the conversion")
    if not mine.steps:
        return CheckResult(name, stage, SKIPPED, "no torch.optim optimizer step was recorded")
    return CheckResult(name, stage, PASSED, f"{len(mine.steps)} steps, learning rates equal to the original's")


def _lrs(step: Step) -> str:
    return ", ".join("?" if lr is None else f"{lr:.6g}" for lr in step.lrs)


def frozen_optimizer(steps: tuple[Step, ...], reference: tuple[Step, ...]) -> str | None:
    """A sentence naming an optimizer that stepped at least twice and never moved its parameters, while the same
    optimizer of ``reference`` did; None when there is none."""
    for index in sorted({s.optimizer for s in steps}):
        mine = [s for s in steps if s.optimizer == index]
        theirs = [s for s in reference if s.optimizer == index]
        if len(mine) < 2 or not _moved(theirs):
            continue
        if not _moved(mine):
            trained = any(p.grad for s in mine for p in s.params)
            why = ("it steps before its gradients exist (step() before backward(), or zero_grad() between them)"
                   if not trained else "its gradients are zero")
            return (f"{mine[0].label} stepped {len(mine)} times and its parameters never changed"
                    f"{' (`' + mine[0].model + '` does not train)' if mine[0].model else ''}: {why}")
    return None


def _moved(steps: list[Step]) -> bool:
    """The parameters of these steps of one optimizer changed from the first to the last (or in their sums)."""
    if len(steps) < 2:
        return False
    first, last = steps[0], steps[-1]
    return any(a.values != b.values or a.total != b.total for a, b in zip(first.params, last.params))


def _parameters_train(mine: ProcessRecord, reference: ProcessRecord, n: int) -> CheckResult:
    name, stage = NAMES[2], _stage(n)
    frozen = frozen_optimizer(mine.steps, reference.steps)
    if frozen is not None:
        return CheckResult(name, stage, FAILED, frozen, f"on {n} processes that model never trains, while in the "
                                                        "original it does")
    if not mine.steps:
        return CheckResult(name, stage, SKIPPED, "no torch.optim optimizer step was recorded")
    optimizers = sorted({s.label for s in mine.steps})
    return CheckResult(name, stage, PASSED, f"the parameters of {', '.join(optimizers)} move as in the original")


def tolerance(step: int) -> tuple[float, float]:
    """(rtol, atol) for the parameters after ``step``: tight up to ``HORIZON``, then doubling every ``HORIZON``."""
    doublings = min(max(step - HORIZON, 0) / HORIZON, 16.0)  # 2**16 > MAX_GROWTH: no overflow on long runs
    growth = min(2.0 ** doublings, MAX_GROWTH)
    return RTOL * growth, ATOL * growth


def _same_as_original(mine: ProcessRecord, reference: ProcessRecord, n: int) -> CheckResult:
    name, stage = NAMES[3], _stage(n)
    if not mine.batches:
        return CheckResult(name, stage, SKIPPED, NOT_SHARED)
    compared = 0
    exempted: list[int] = []  # values that differ only as an adaptive step on a gradient of rounding noise
    rounded: list[tuple[int, float]] = []  # (step, share of its update) excused as float32 rounding of a gradient
    before: dict[int, tuple[Step, Step]] = {}  # optimizer -> (the original's, process 0's) previous step
    for theirs, ours in zip(reference.steps, mine.steps):
        if ours.inexact:
            if compared == 0:
                return CheckResult(name, stage, SKIPPED, f"not exact from step {ours.n} on: {ours.inexact[0]}; "
                                                         "nothing was compared")
            return CheckResult(name, stage, PASSED, f"equal after {compared} steps; not exact from step {ours.n} on: "
                                                    f"{ours.inexact[0]}")
        if theirs.optimizer != ours.optimizer or len(theirs.params) != len(ours.params) or ours.n > COMPARED_STEPS:
            break
        rtol, atol = tolerance(ours.n)
        atol = max(atol, adaptive_tolerance(theirs))
        previous = before.get(theirs.optimizer)
        for index, (a, b) in enumerate(zip(theirs.params, ours.params)):
            if a.shape != b.shape or len(a.values) != len(b.values):
                break
            if allclose(b.values, a.values, rtol, atol) or _rounding_steps(
                    b.values, a.values, a.grads, theirs, rtol, atol, exempted):
                continue
            share = None if previous is None else update_share(a, b, *(_param(s, index) for s in previous))
            if share is not None and share <= ROUNDING_SHARE:
                rounded.append((ours.n, share))
                continue
            added = "" if share is None else f"; what the step added to the difference is {share:.2%} of its update"
            return CheckResult(
                name, stage, FAILED,
                f"after step {ours.n} ({ours.label}), process 0's {a.describe(index)} differs from the original's by "
                f"up to {max_difference(b.values, a.values):.3g} (rtol {rtol:.3g}, atol {atol:.3g}){added}",
                _cause(ours, theirs, index, n))
        before[theirs.optimizer] = (theirs, ours)
        compared += 1
    if not compared:
        return CheckResult(name, stage, SKIPPED, "no optimizer step to compare")
    noise = (f"; {sum(exempted)} values whose original gradient is zero up to rounding (a bias before a "
             "normalisation) moved by an adaptive optimizer's step on that rounding, within the learning rate"
             if exempted else "")
    if rounded:
        first, largest = rounded[0][0], max(share for _, share in rounded)
        noise += (f"; from step {first} on the gradients differ by float32 rounding: what each step added to the "
                  f"difference is at most {largest:.2%} of that step's update (up to {ROUNDING_SHARE:.0%} is rounding)")
    return CheckResult(name, stage, PASSED, f"process 0's parameters equal the original's after each of {compared} "
                                            f"steps (rtol {RTOL:g} up to step {HORIZON}, growing after){noise}")


def _param(step: Step, index: int) -> Parameter | None:
    return step.params[index] if index < len(step.params) else None


ROUNDING_SHARE = 0.05  # of a step's own update (L2 over a parameter): float32 rounding of its gradient, not a bug


def update_share(theirs: Parameter, mine: Parameter, theirs_before: Parameter | None,
                 mine_before: Parameter | None) -> float | None:
    """What one step added to process 0's difference from the original in a parameter, as a share of the original's
    own update of it in that step (L2 over the recorded values); None where the values before the step are not
    recorded alike or the original did not move it (a frozen parameter, a learning rate of 0: nothing to excuse)."""
    if theirs_before is None or mine_before is None:
        return None
    sizes = {len(theirs.values), len(mine.values), len(theirs_before.values), len(mine_before.values)}
    if len(sizes) != 1 or theirs.sampled != theirs_before.sampled or mine.sampled != theirs.sampled:
        return None
    update = added = 0.0
    for a, b, a0, b0 in zip(theirs.values, mine.values, theirs_before.values, mine_before.values):
        update += (a - a0) ** 2
        added += ((b - a) - (b0 - a0)) ** 2
    if not update > 0.0 or added != added:
        return None
    return (added / update) ** 0.5


# Optimizers that divide each gradient by a running measure of its own size: where a gradient's history nearly
# cancels (m small against sqrt(v)), a float difference in the gradient becomes a difference of a share of the
# learning rate in the step. Wrong conversions move such parameters by whole steps (other data, no training, a
# learning rate that differs, which the schedule check compares exactly); float noise moves them by a few hundredths.
ADAPTIVE = frozenset({"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam",
                      "Adafactor", "Lamb", "LAMB", "AdaBelief"})
ADAPTIVE_SHARE = 0.05  # of the learning rate, per step so far


def adaptive_tolerance(step: Step) -> float:
    """The absolute tolerance an adaptive optimizer's parameters get after ``step``: a twentieth of its largest
    learning rate per step taken, up to ``HORIZON`` steps (0 for any other optimizer, or without learning rates)."""
    rates = [lr for lr in step.lrs if lr is not None and lr == lr]
    if step.kind not in ADAPTIVE or not rates:
        return 0.0
    return ADAPTIVE_SHARE * max(rates) * min(step.n, HORIZON)


ROUNDING_GRAD = 1e-5  # a gradient this small against the step's largest is rounding noise (a bias before BatchNorm)


def _rounding_steps(mine: Sequence[float], theirs: Sequence[float], grads: Sequence[float], step: Step,
                    rtol: float, atol: float, exempted: list[int]) -> bool:
    """Whether every value of a parameter that differs from the original's is one whose original gradient is zero up to
    rounding, moved by at most twice the learning rate per step so far. Adam and its kin divide a gradient by its own
    size: a gradient that is rounding noise (a Linear's bias right before a BatchNorm, whose gradient is exactly zero
    in exact arithmetic) then takes a step of up to the learning rate in a direction the summation order decides, so
    N processes and one differ there legitimately. A real error changes values whose gradient is not noise, and those
    are never excused. Needs every value and its gradient (no sample), and the step's learning rates."""
    if not grads or len(grads) != len(theirs) or len(mine) != len(theirs):
        return False
    rates = [lr for lr in step.lrs if lr is not None]
    scale = max((abs(g) for p in step.params for g in p.grads if g == g), default=0.0)
    if not rates or scale == 0.0:
        return False
    bound = 2.0 * max(rates) * step.n
    count = 0
    for a, b, g in zip(mine, theirs, grads):
        if a == b or abs(a - b) <= atol + rtol * abs(b):
            continue
        if not (abs(g) <= ROUNDING_GRAD * scale and abs(a - b) <= bound):
            return False
        count += 1
    exempted.append(count)
    return True


def _cause(ours: Step, theirs: Step, index: int, n: int) -> str:
    """Why process 0's parameters left the original's at this step, in words a user acts on."""
    outside = [p for p in ours.params if p.grad and p.wrapper is None]
    if outside:
        model = f"`{ours.model}`" if ours.model else f"the model of {ours.label}"
        return (f"{model} was trained outside the prepared model: its gradients are not averaged over the {n} "
                "processes (pass it to accelerator.prepare, and call the prepared model)")
    ratio = _grad_ratio(ours, theirs)
    if ratio is not None and abs(ratio * n - 1) < 1e-3:
        return (f"the gradients are 1/{n} of the original's: the conversion scales the loss by 1/{n} (divided by "
                f"accelerator.num_processes?); DDP already averages the gradients over the processes, and exact mode "
                f"scales a loss summed over the batch to the original's, so remove the division")
    if ratio is not None and abs(ratio / n - 1) < 1e-3:
        return f"the gradients are {n}x the original's: the loss is scaled by the number of processes"
    return (f"the {n} processes together do not compute the original's update on the same batches: the gradients, "
            "the learning rate or the data differ (a value computed from one process's share, a random draw "
            "that depends on the batch size, an update outside the optimizer)")


def _grad_ratio(ours: Step, theirs: Step) -> float | None:
    """The constant ratio of process 0's gradients to the original's at this step, if there is one."""
    pairs = [(b, a) for p, q in zip(ours.params, theirs.params) for b, a in zip(p.grads, q.grads) if abs(a) > 1e-12]
    if len(pairs) < 2:
        return None
    ratios = [b / a for b, a in pairs]
    first = ratios[0]
    return first if all(abs(r - first) <= 1e-3 * abs(first) for r in ratios) else None
