"""Metric objects fed in a loop over a prepared loader: ``metric(outputs, target, loss)`` at every batch, where the
object's class adds what it is given to its own attributes (``self.correct += ...``, ``self.total += ...``), and
``metric.value()`` is read after the loop.

On N processes each process feeds its object 1/N of the batches, so what it holds after the loop is one process's
share (siamese-triplet's ``AccumulatedAccuracyMetric``: the epoch's training accuracy printed was process 0's). The
counters live in an object of the program's own class, summed where the conversion has no accelerator, and read
through a method of its own: the conversion cannot reduce them where they are complete, so ``find_averages`` keeps
such a call as a running value it cannot reduce (``Kept``), and the averages rule reports it (ACC028) unless what is
fed is already global (gathered by the evaluation rule).

The object is found where the call names it: a name bound to an instance of the class (``metric =
AccumulatedAccuracyMetric()``), or the variable of a loop over a list of them (``for metric in metrics:``), the list
followed through the parameters of the functions that take it (``metrics=[AccumulatedAccuracyMetric()]`` passed to
``fit`` and on to ``train_epoch``) and their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.plan import Plan

_DEPTH = 6  # how many names and parameters a class is followed through
_ADDING = ("append", "extend")  # a list attribute the object grows at every call


@dataclass(frozen=True)
class MetricCall:
    """``metric(outputs, target)`` (or ``metric.update(...)``) in ``loop`` on an object that sums into itself."""

    name: str  # what holds the objects and is read after the loop: the object's name, or the list's
    stmt: cst.BaseStatement
    call: cst.Call
    cls: Scope  # the class whose method adds to its attributes
    attribute: str  # one attribute it adds to (``correct``)


def metric_calls(plan: Plan, loop: Loop, stmts: list[cst.BaseStatement]) -> list[MetricCall]:
    """The statements of ``stmts`` (``loop``'s own, and those of loops nested in it) that feed an accumulating
    metric object: a call of the object, or of a method of it that adds to the object's attributes."""
    found: list[MetricCall] = []
    for stmt in stmts:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            continue
        small = stmt.body[0]
        value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
        if not isinstance(value, cst.Call):
            continue
        func = value.func
        if isinstance(func, cst.Name):
            receiver, method = func.value, "__call__"
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            receiver, method = func.value.value, func.attr.value
        else:
            continue
        holder, expr = _holder(plan, loop, stmt, receiver)
        for cls in _classes(plan, loop.scope, expr, _DEPTH):
            function = plan.classes.method(cls, method)
            added = _adds_to_self(function) if function is not None else None
            if added is not None:
                found.append(MetricCall(holder, stmt, value, cls, added))
                break
    return found


def _holder(plan: Plan, loop: Loop, stmt: cst.BaseStatement, receiver: str) -> tuple[str, cst.BaseExpression]:
    """What holds the object named ``receiver`` at ``stmt``: the list a loop nested in ``loop`` walks when
    ``receiver`` is that loop's variable (``for metric in metrics``), else the name itself."""
    for inner in plan.facts.loops:
        if inner is loop or receiver not in inner.targets or not any(n is inner.node for n in plan.facts.chain(stmt)):
            continue
        if isinstance(inner.node.iter, cst.Name):
            return inner.node.iter.value, inner.node.iter
    return receiver, cst.Name(receiver)


def _classes(plan: Plan, scope: Scope, expr: cst.BaseExpression, depth: int) -> list[Scope]:
    """The classes of the program whose instances ``expr`` may hold (an instance, or a list or tuple of them)."""
    if depth <= 0:
        return []
    if isinstance(expr, cst.Call):
        cls = plan.classes.class_of(scope, expr.func)
        return [cls] if cls is not None else []
    if isinstance(expr, (cst.List, cst.Tuple)):
        return [c for e in expr.elements for c in _classes(plan, scope, e.value, depth - 1)]
    if not isinstance(expr, cst.Name):
        return []
    name = expr.value
    owner = scope.resolve(name)
    if owner is None:
        return []
    found = [c for b in owner.bindings.get(name, []) if b.value is not None and not b.aug
             for c in _classes(plan, b.where, b.value, depth - 1)]
    if owner.kind == "function" and name in owner.param_names and isinstance(owner.node, cst.FunctionDef):
        param = next(p for p in owner.params if p.name.value == name)
        if param.default is not None:
            found += _classes(plan, owner, param.default, depth - 1)
        for site in plan.call_sites(owner):
            arg = plan.arg_for(site, owner, name)
            if arg is not None:
                found += _classes(plan, site.scope, arg.value, depth - 1)
    return found


def _adds_to_self(function: Scope) -> str | None:
    """The first attribute ``function`` (a method) adds to: ``self.x += ...``, or ``self.x.append(...)`` (a list of
    per-batch values it summarises later: siamese-triplet's ``AverageNonzeroTripletsMetric``), or None."""
    if not isinstance(function.node, cst.FunctionDef):
        return None
    for node in _walk(function.node.body):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) and _on_self(node.target):
            return node.target.attr.value  # type: ignore[attr-defined]
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _ADDING \
                and _on_self(node.func.value):
            return node.func.value.attr.value  # type: ignore[attr-defined]
    return None


def _on_self(node: cst.BaseExpression) -> bool:
    """``self.x``."""
    return isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"


def _walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node under ``node``, nested functions and classes left out."""
    out: list[cst.CSTNode] = []
    for child in node.children:
        if isinstance(child, (cst.FunctionDef, cst.ClassDef)):
            continue
        out.append(child)
        out += _walk(child)
    return out
