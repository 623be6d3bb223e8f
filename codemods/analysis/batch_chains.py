"""A value computed from a batch's mean loss by a chain of statements, summed over a gathered loop and divided by
the number of batches: computed per original batch again.

A batch's mean loss summed as it is and divided by ``len(loader)`` is that chain of one statement: over a gathered
pass the mean of N batches, the sum over fewer passes than the original's batches, and with an uneven last round
(the padding dropped) the last pass weighs as much as a full one: close to the original's, not equal.

pytorch/examples super_resolution sums ``psnr = 10 * log10(1 / mse.item())`` with ``mse = criterion(prediction,
target)`` over its test loop and divides by ``len(testing_data_loader)``. Over a gathered loop (``prediction, target =
accelerator.gather_for_metrics(...)``) each pass holds, in order, the original's batches of the loader's batch size
(``analysis/loss_means.py``), so the statements from the mean loss to the addition run once per original batch in
``for prediction, target in zip(prediction.split(b), target.split(b)):``, ``b`` the prepared loader's batch size;
the sum is then the original's, and it is divided by the original's number of batches,
``len(loader.batch_sampler.batch_sampler)`` (the batch sampler the prepared loader deals from, on any number of
processes and with split batches), not by the number of
passes one process walks. Any other shape (a statement that is not a plain assignment, a name of the chain read after
it in the loop, a divisor other than ``len(loader)``, a read other than a division) is left to be reported (ACC042).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.forward_reads import names_read
from accelify.codemods.analysis.loss_means import mean_loss, split_rows, starred_reads
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.shard_counts import under_progress_bar
from accelify.codemods.analysis.snippets import code_of


@dataclass(frozen=True)
class BatchChain:
    """The statements to run per original batch, the gathered names they split, and the divisors to change."""

    stmts: tuple[cst.BaseStatement, ...]
    split: tuple[str, ...]
    size: str  # the prepared loader's per-process batch size, as code
    divisors: tuple[tuple[cst.Call, cst.BaseStatement], ...]  # ``len(loader)`` dividing the sum after the loop, where
    batches: str  # the original's number of batches, as code


def batch_chain(plan: Plan, loop: Loop, name: str, update: cst.BaseStatement, gathered: set[str],
                reads: list[cst.BaseStatement], accelerate: bool = False,
                forwards: dict[cst.CSTNode, str] | None = None) -> BatchChain | None:
    """The chain of statements in ``loop``'s body ending at ``update`` (``name += value``) that starts at a batch's
    mean loss of ``gathered`` tensors, when every read of ``name`` in ``reads`` divides it by ``len(loader)`` of the
    loop's loader; else None (see the module docstring). For Hugging Face Accelerate (``accelerate``), whose loader on
    one process keeps the original batch sampler, the count reads it where the sharding one is missing. ``forwards``:
    the forward calls the evaluation rule takes out and gathers, each read as the gathered name that replaces it
    (``test_loss += criterion(model(x), y).item()`` reads ``output`` and ``y``)."""
    forwards = forwards or {}
    body = _body(loop)
    source = plan.loop_source(loop)
    if body is None or update not in body or source is None or dotted(source) is None:
        return None
    end = body.index(update)
    needed = _reads(_stmt(update).value, forwards)  # type: ignore[union-attr]
    start = end
    for i in range(end - 1 if not _loss_here(plan, loop, _stmt(update).value) else -1, -1, -1):  # type: ignore[union-attr]
        assign = _stmt(body[i])
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            break
        bound = assign.targets[0].target.value
        if bound not in needed:
            break
        needed = (needed - {bound}) | _reads(assign.value, forwards)
        start = i
        if _loss_here(plan, loop, assign.value):
            break
    chain = body[start:end + 1]
    first = _stmt(chain[0])
    if not isinstance(first, (cst.Assign, cst.AugAssign)) or not _loss_here(plan, loop, first.value) \
            or (start != end and not isinstance(first, cst.Assign)):
        return None  # ``test_loss += criterion(out, y).item()`` alone is a chain of one statement
    if not all(n in gathered for a in _stripped(first.value).args for n in _reads(a.value, forwards) - _called(a.value)):  # type: ignore[attr-defined]
        return None  # a mean loss of values the loop does not gather: its batches cannot be told apart
    split = [n for n in _ordered_reads(chain, forwards) if n in gathered]
    bound = {_stmt(s).targets[0].target.value for s in chain[:-1]}  # type: ignore[union-attr]
    if not split or any((_reads(s) & (bound | set(split))) for s in body[end + 1:]):
        return None  # a later statement of the pass reads a name the per-batch loop leaves as its last batch's
    if any(name in _reads(s) for s in loop.stmts if s is not update):
        return None  # read in the pass (a running value printed every k batches): the passes are not the batches
    loader = code_of(source)
    divisors = []
    for stmt in reads:
        rebound = rebinding_division(stmt, name)  # ``loss = loss / len(loader)``: the later reads read the mean
        found = [d for d in m.findall(stmt, m.BinaryOperation(operator=m.Divide())) if m.matches(d.left, m.Name(name))]  # type: ignore[attr-defined]
        if rebound is None and len(found) != len(m.findall(stmt, m.Name(name))):
            return None
        for right in [rebound] if rebound is not None else [d.right for d in found]:  # type: ignore[attr-defined]
            if not (m.matches(right, m.Call(func=m.Name("len"))) and len(right.args) == 1
                    and code_of(under_progress_bar(plan, loop.scope, right.args[0].value)) == loader):  # type: ignore[attr-defined]
                return None
            divisors.append((right, stmt))
        if rebound is not None:
            break
    if not divisors:
        return None
    sampler = f"{loader}.batch_sampler"
    batches = f'len(getattr({sampler}, "batch_sampler", {sampler}))' if accelerate else f"len({sampler}.batch_sampler)"
    return BatchChain(tuple(chain), tuple(split), f"{sampler}.batch_size", tuple(divisors), batches)


def rebinding_division(stmt: cst.BaseStatement, name: str) -> cst.BaseExpression | None:
    """The divisor ``d`` of ``name /= d`` or ``name = name / d`` (``d`` not reading ``name``): the statement that makes
    the sum its mean, so that what reads ``name`` after it reads the mean. None for any other statement."""
    small = _stmt(stmt)
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.DivideAssign) and m.matches(small.target, m.Name(name)):
        divisor = small.value
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and m.matches(small.targets[0].target, m.Name(name)) \
            and m.matches(small.value, m.BinaryOperation(left=m.Name(name), operator=m.Divide())):
        divisor = small.value.right  # type: ignore[attr-defined]
    else:
        return None
    return None if m.findall(divisor, m.Name(name)) else divisor


def per_batch_loop(chain: BatchChain, group: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``group`` (the chain's statements, as edited) in a loop over the original batches a gathered pass holds."""
    names = ", ".join(chain.split)
    sequences = {n for s in chain.stmts for n in starred_reads(s)}
    parts = [split_rows(n, chain.size, n in sequences) for n in chain.split]
    over = parts[0] if len(parts) == 1 else f"zip({', '.join(parts)})"
    head = cst.parse_statement(f"for {names} in {over}:\n    pass\n")
    assert isinstance(head, cst.For)
    inner = [s.with_changes(leading_lines=()) if i == 0 else s for i, s in enumerate(group)]
    return [head.with_changes(body=head.body.with_changes(body=inner), leading_lines=group[0].leading_lines)]  # type: ignore[attr-defined]


def _stripped(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` without the methods and ``float(...)`` a mean loss passes through (``criterion(out, y).item()``)."""
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and not expr.args:
            expr = expr.func.value
        elif isinstance(expr, cst.Call) and m.matches(expr.func, m.Name("float")) and len(expr.args) == 1:
            expr = expr.args[0].value
        else:
            return expr


def _loss_here(plan: Plan, loop: Loop, value: cst.BaseExpression) -> bool:
    """Whether ``value`` computes a batch's mean loss itself (a loss call, not a name bound to one)."""
    return isinstance(_stripped(value), cst.Call) and mean_loss(plan, loop, value)


def _body(loop: Loop) -> list[cst.BaseStatement] | None:
    node = loop.node
    return list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else None  # type: ignore[attr-defined]


def _stmt(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def _reads(expr: cst.CSTNode, forwards: dict[cst.CSTNode, str] | None = None) -> set[str]:
    return set(names_read(expr, forwards))


def _called(expr: cst.CSTNode) -> set[str]:
    """The names ``expr`` calls (``model`` of ``criterion(model(x), y)`` after ``x`` is gathered): a function or a
    module, the same on every process, not data of a batch."""
    return {c.func.value for c in m.findall(expr, m.Call()) if isinstance(c.func, cst.Name)}  # type: ignore[attr-defined]


def _ordered_reads(chain: list[cst.BaseStatement], forwards: dict[cst.CSTNode, str] | None = None) -> list[str]:
    return list(dict.fromkeys(n for stmt in chain for n in names_read(stmt, forwards)))
