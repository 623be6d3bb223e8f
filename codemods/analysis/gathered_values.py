"""Which values of a loop are the same on every process because the loop gathered them for metrics (or computed
them from gathered values alone): sums of those are already the whole data set's (``global_sum``: ``rules/averages.py``
leaves them to ``rules/gathered_sums.py``), unless how they are summed or divided makes them not the original's
(``gathered_mismatch``)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.forward_reads import names_read
from accelify.codemods.analysis.facts import Facts, Loop, Scope
from accelify.codemods.analysis.loss_means import mean_loss, transformed_mean_loss
from accelify.codemods.analysis.meter_sums import MeterSums
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.shard_sums import Accumulator, Kept


def gathered_in(agreement: Agreement, loop: Loop) -> set[str]:
    """The names a loop gathers for metrics, and those it computes from them alone (``_, predicted =
    torch.max(outputs.data, 1)`` after ``outputs, labels = accelerator.gather_for_metrics(...)``)."""
    names: set[str] = set()
    for stmt in loop.stmts:
        if agreement.gathers(stmt):
            names |= agreement.gathered[stmt]
            if stmt not in agreement.gathered_before:
                continue
            # ``_, yhat = torch.max(model(x).data, 1)``: its forward taken out and gathered before it, so what it
            # binds is computed from the gathered rows (set W's W7 found it: the count of ``yhat == y`` was also
            # reduced after the loop, N times the original's)
        if names and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            reads = _reads(assign.value, agreement.forward_names)
            if reads & names and all(n in names or agreement.uniform(loop.scope, cst.Name(n), stmt) for n in reads):
                names |= {n for t in assign.targets for n in target_names(t.target)}
    return names


def _reads(expr: cst.BaseExpression, forwards: dict[cst.CSTNode, str] | None = None) -> set[str]:
    """The variables ``expr`` reads (not attribute names, not keywords); a forward the evaluation rule takes out reads
    as its gathered name (``total += F.mse_loss(model(x), y).item()`` reads ``output``, not this process's ``x``)."""
    return set(names_read(expr, forwards))


def is_global(agreement: Agreement, scope: Scope, value: cst.BaseExpression, at: cst.BaseStatement, gathered: set[str]) -> bool:
    """Whether ``value`` is the same on every process: the agreement says so, or every name it reads that the
    agreement cannot prove global is one the loop gathers (module-level code, which it does not follow in order)."""
    if agreement.uniform(scope, value, at):
        return True
    names = _reads(value, agreement.forward_names)
    return bool(gathered) and all(n in gathered or agreement.uniform(scope, cst.Name(n), at) for n in names)


def guards_global(
    agreement: Agreement, facts: Facts, acc: Accumulator, update: cst.BaseStatement, gathered: set[str]
) -> bool:
    """Whether every condition and inner loop an addition sits under in the batch loop agrees across processes: a
    constant added under a test of the batch's own outputs (``if torch.round(p) == y[idx]: correct += 1`` in a loop
    over ``out``) counts this process's samples."""
    for holder in facts.chain(update)[1:]:
        if holder is acc.loop.node:
            return True
        tests = [holder.test] if isinstance(holder, (cst.If, cst.While)) else [holder.iter] if isinstance(holder, cst.For) else []
        if any(not is_global(agreement, acc.loop.scope, t, holder, gathered) for t in tests):
            return False
    return True


def global_sum(agreement: Agreement, facts: Facts, acc: Accumulator, gathered: set[str]) -> bool:
    """Whether every value ``acc`` adds, under every test and inner loop it is added in, is the same on every process
    (``gathered``: what its loop gathers, ``gathered_in``): the sum is then the whole data set's, not a share."""
    return not acc.local and all(
        is_global(agreement, acc.loop.scope, v, u, gathered) and guards_global(agreement, facts, acc, u, gathered)
        for v, u in zip(acc.increments, acc.updates)
    )


def local_meters(agreement: Agreement, found: list[MeterSums]) -> tuple[list[MeterSums], list[Kept]]:
    """The meters to reduce, and, as running values kept, those of a loop that gathers for metrics fed values that
    are already global (left as they are) or partly global (reported). A value every process feeds alike in a loop
    that gathers nothing (the learning rate) is reduced with the rest: its sum and count are then the original's,
    which took N times as many steps."""
    local, kept = [], []
    for meters in found:
        gathered = gathered_in(agreement, meters.loop)
        if gathered and any(is_global(agreement, meters.loop.scope, v, u, gathered) for u, v in meters.values):
            kept += [Kept(meters.name, meters.loop, u, tuple(v for s, v in meters.values if s is u)) for u in meters.updates]
        else:
            local.append(meters)
    return local, kept


# ACC042's ``why`` for the two mismatches ``rules/gathered_sums.py`` may still fix (it tells them apart by identity)
MEAN_LOSSES = ("each value added is a batch's mean loss, and the sum is divided by the data set's size or read as it "
               "is: on N processes it is 1/N of the original's")
TRANSFORMED = ("each value added is computed from a batch's mean loss (a PSNR, a log), and over a gathered pass that "
               "is of the mean of N batches, not the sum of the values of each: no division makes it the original's")

PER_PASS_LIST = ("each value appended is computed from a whole gathered pass (N processes' batches at once), so the "
                 "list holds one value per pass, not one per original batch, and a summary of it is not the original's")
BY_PASS_INDEX = ("it is divided by `{index}`, the loop's last index, which counts this process's passes, each of N "
                 "processes' batches at once: 1/N of the original's, so the quotient is not the original's (and with one "
                 "pass it is a division by zero)")
BATCH_MEANS = ("each value added is a batch's mean (a mean loss, an accuracy), and over a gathered pass that is the "
               "mean of N batches at once: summed over 1/N as many passes, with an uneven last round, it is not the "
               "original's sum of batch means")


def gathered_mismatch(plan: Plan, acc: Accumulator) -> str | None:
    """Why a sum over a gathered loop is not the original's (``analysis/loss_means.py``), or None."""
    if acc.keys:
        return None
    if any(transformed_mean_loss(plan, acc.loop, v) for v in acc.increments):
        return TRANSFORMED
    if not acc.mean and any(mean_loss(plan, acc.loop, v) for v in acc.increments):
        return MEAN_LOSSES
    if acc.mean and acc.kind == "int":
        return ("each value added is a count over the gathered batches, and the sum is divided by the number of "
                "batches one process walks: on N processes it is N times the original's")
    return None
