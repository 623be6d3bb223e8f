"""Running sums over batches a loop draws with ``next`` from a prepared loader, read after that loop.

``shard_sums`` follows the sums of loops that walk a loader (``for x, y in loader:``). A program may instead draw its
batches itself: ``it = iter(loader)``, then ``x, y = next(it)`` in a ``while`` loop (set P's P4, a conditional GAN
whose discriminator steps draw ``k`` batches per generator step) or in a loop over indices (``for step in
range(n):``). Each process then draws its own shard's batches just the same, so ``total += loss.item()`` or
``totals[2] += loss`` summed there and read after the loop (an epoch's mean loss logged) is one process's share.
They are found here and reported by the averages rule (ACC028): the loop's count of draws and where the sum is
complete are the program's own, so no reduction is put in for the user.

The loop is the outermost ``while`` around the draw inside the nearest ``for`` (the draws of one pass: P4's
``while i < len(it):`` around its ``while k < d_iters:``), or, without one, the nearest ``for`` around it when that
loop walks indices rather than a loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.plan import Plan


@dataclass(frozen=True)
class DrawnSum:
    """``name`` summed (``update``: ``name += value`` or ``name[k] += value``) over ``loop``, whose batches are drawn
    with ``next`` from a prepared loader, and read after ``loop``."""

    name: str
    scope: Scope
    loop: cst.For | cst.While
    update: cst.BaseStatement
    value: cst.BaseExpression


def drawn_sums(plan: Plan) -> list[DrawnSum]:
    """Every running sum over a loop that draws its batches from a prepared loader (see the module docstring)."""
    found: list[DrawnSum] = []
    loops: set[int] = set()
    for site in plan.facts.calls:
        if not _draws_prepared(plan, site):
            continue
        loop = _drawing_loop(plan, site)
        if loop is None or id(loop) in loops:
            continue
        loops.add(id(loop))
        for stmt in m.findall(loop.body, m.SimpleStatementLine()):
            assert isinstance(stmt, cst.SimpleStatementLine)
            summed = _sum(stmt)
            if summed is None or _in_function(plan, stmt, loop):
                continue
            name, value = summed
            if _set_before(plan, site.scope, name, loop) and reads_after(plan, loop, site.scope, name):
                found.append(DrawnSum(name, site.scope, loop, stmt, value))
    return found


def _draws_prepared(plan: Plan, site: CallSite) -> bool:
    return draws_prepared(plan, site.scope, site.node, site.stmt)


def draws_prepared(plan: Plan, scope: Scope, call: cst.Call, at: cst.BaseStatement) -> bool:
    """Whether ``call`` is ``next(it)`` (``it = iter(loader)``) or ``next(iter(loader))`` of a loader the plan
    prepares: a batch of this process's shard, on the accelerator's device."""
    if not (m.matches(call.func, m.Name("next")) and call.args):
        return False
    source = call.args[0].value
    values = [source]
    if isinstance(source, cst.Name):
        values = [b.value for b in scope.bindings.get(source.value, []) if b.value is not None]
    for value in values:
        if isinstance(value, cst.Call) and m.matches(value.func, m.Name("iter")) and len(value.args) == 1:
            loader = value.args[0].value
            prepared = plan.prepared(scope, loader, at)
            if (prepared is not None and prepared.role == "loader") or any(w.call is loader for w in plan.wrapped):
                return True  # (a loader built where it is drawn from is prepared there: ``iter(DataLoader(...))``)
    return False


def _drawing_loop(plan: Plan, site: CallSite) -> cst.For | cst.While | None:
    whiles: list[cst.While] = []
    for outer in plan.facts.chain(site.stmt)[1:]:
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(outer, cst.While):
            whiles.append(outer)
        elif isinstance(outer, cst.For):
            if whiles:
                break
            walked = next((lp for lp in plan.facts.loops if lp.node is outer), None)
            return outer if walked is not None and plan.loader_of(walked) is None else None
    return whiles[-1] if whiles else None


def _sum(stmt: cst.SimpleStatementLine) -> tuple[str, cst.BaseExpression] | None:
    """``name += value`` / ``name[k] += value``, ``value`` not a constant count (``steps += 1``)."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.AugAssign):
        return None
    small = stmt.body[0]
    if not isinstance(small.operator, cst.AddAssign) or isinstance(small.value, (cst.Integer, cst.Float)):
        return None
    target = small.target.value if isinstance(small.target, cst.Subscript) else small.target
    return (target.value, small.value) if isinstance(target, cst.Name) else None


def _in_function(plan: Plan, stmt: cst.BaseStatement, loop: cst.BaseStatement) -> bool:
    for outer in plan.facts.chain(stmt)[1:]:
        if outer is loop:
            return False
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            return True
    return True


def _set_before(plan: Plan, scope: Scope, name: str, loop: cst.BaseStatement) -> bool:
    """Whether ``scope`` binds ``name`` (not by ``+=``) before ``loop`` starts."""
    start = plan.facts.order[loop][0]
    return any(not b.aug and plan.facts.order[b.stmt][1] < start for b in scope.bindings.get(name, []))
