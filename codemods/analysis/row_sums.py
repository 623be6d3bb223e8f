"""A sum over a gathered loop of values that add up over the rows, divided by the number of batches.

U11 (a U-Net's ROC): ``TP += np.sum(pred & mask) / length_images`` per batch of a test loader, then ``TP /
len(self.test_dataloader)``. Over a gathered loop (``output, mask = accelerator.gather_for_metrics(...)``) each pass
holds N processes' batches, and a sum over the rows of a pass is the sum of the sums of the batches it holds (the
padding that evened out the last round is dropped): the running sum is the original's whole. What is wrong is the
divisor, this process's number of batches (1/N of the original's): it becomes the original's number of batches,
``len(loader.batch_sampler.batch_sampler)``. Values that do not add up over the rows (a mean, a ratio of the pass)
are not this shape.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.batch_tails import batch_divisors
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.shard_sums import Accumulator
from accelify.codemods.analysis.snippets import code_of

_SUMS = ("np.sum", "numpy.sum", "torch.sum", "np.count_nonzero", "numpy.count_nonzero", "torch.count_nonzero")


def row_sum_divisors(plan: Plan, loop: Loop, acc: Accumulator, reads: list[cst.BaseStatement], accelerate: bool = False
                     ) -> tuple[list[tuple[cst.Call, cst.BaseStatement]], str] | None:
    """For a sum of ``loop`` (gathered) whose every value adds up over the rows (``np.sum(...)``, ``x.sum()``, over a
    number that does not change in the loop), divided by ``len(loader)`` after it: those divisors, with the statements
    holding them, and the original's number of batches as code. None for any other shape."""
    source = plan.loop_source(loop)
    if not acc.mean or acc.end is not loop.node or len(acc.updates) != 1 or source is None or dotted(source) is None:
        return None
    bound = {n.value for target in m.findall(loop.node.body, m.AssignTarget()) for n in m.findall(target, m.Name())}  # type: ignore[attr-defined]
    bound |= set(loop.targets)
    if not all(_row_sum(v, bound) for v in acc.increments):
        return None
    loader = code_of(source)
    divisors = batch_divisors(plan, loop, acc.name, reads, loader)
    if not divisors:
        return None
    sampler = f"{loader}.batch_sampler"
    batches = f'len(getattr({sampler}, "batch_sampler", {sampler}))' if accelerate else f"len({sampler}.batch_sampler)"
    return divisors, batches


def _row_sum(expr: cst.BaseExpression, bound: set[str]) -> bool:
    """``np.sum(pred & mask)``, ``(pred == y).sum().item()``, ``float(x.sum())``, divided or multiplied by a name the
    loop does not bind or a number."""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "item" and not expr.args:
            expr = expr.func.value
        elif isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("float") | m.Name("int")) and len(expr.args) == 1:
            expr = expr.args[0].value
        elif isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Divide, cst.Multiply)) \
                and _constant(expr.right, bound):
            expr = expr.left
        else:
            break
    if not isinstance(expr, cst.Call):
        return False
    if dotted(expr.func) in _SUMS:
        return len(expr.args) == 1 and expr.args[0].keyword is None
    return isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "sum" and not expr.args


def _constant(expr: cst.BaseExpression, bound: set[str]) -> bool:
    """A number, or a name the loop does not bind."""
    return isinstance(expr, (cst.Integer, cst.Float)) or (isinstance(expr, cst.Name) and expr.value not in bound)
