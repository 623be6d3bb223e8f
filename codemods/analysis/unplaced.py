"""CPU tensors a prepared model reads that nothing places (field test A10, issue 23 class 7).

A program that names a device somewhere gets ``Accelerator()``: ``prepare`` puts each model on the machine's
device (a GPU where there is one). A tensor the script makes with a factory (``torch.arange(...)``,
``torch.ones(4, 2)``) and never moves stays on the CPU; when a prepared model reads it outside the batches of a
prepared loader (full-batch training, ``for x in torch.ones(4, 2): model(x)``), the two meet on different
devices on a GPU machine, while the original ran that part on the CPU. This module finds those tensors: the
model's inputs, and the values a call combines with its output (``loss_fn(model(X), y)``, or
``p = model(X)`` then ``loss_fn(p, y)`` in the same scope), traced back through names, arithmetic, indexing and shape-keeping
methods to where they are made. Whether one can be moved there is analysis/reads.py's question.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Loop, Scope
from accelify.codemods.analysis.placed import FACTORIES, in_loader_loop
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.reads import SAME_DEVICE, reads_take_any_device
from accelify.codemods.analysis.roles import is_cpu_device


@dataclass(frozen=True)
class Unplaced:
    """A tensor made on the CPU that a prepared model reads: its name as the model's call reads it, the
    expression that makes it, and the call that reads it."""

    name: str
    made: cst.BaseExpression
    reader: cst.Call
    stmt: cst.BaseStatement  # the statement that makes it
    scope: Scope  # the scope that statement is in
    placeable: bool  # every read of it (and of what is computed from it) takes a tensor on any device


def unplaced_inputs(plan: Plan) -> list[Unplaced]:
    """The CPU-made, never-placed tensors that prepared models read outside prepared loaders' batches."""
    facts = plan.facts
    found: list[Unplaced] = []
    seen: set[int] = set()
    for site in facts.calls:
        if plan.prepared_model(site.scope, site.node.func, site.stmt) is None or in_loader_loop(plan, site):
            continue
        readers = [site.node]
        output = _bound_output(site)
        for outer in site.scope.calls:  # ``loss_fn(model(X), y)``, ``p = model(X); loss_fn(p, y)``: y meets the output
            if outer.stmt is site.stmt and any(a.value is site.node for a in outer.node.args):
                readers.append(outer.node)
            elif output is not None and _reads_output(plan, outer, output, site):
                readers.append(outer.node)
        for reader in readers:
            for leaf in (leaf for arg in reader.args if arg.value is not site.node for leaf in _operands(arg.value)):
                trace = _Trace(site.stmt, site.scope)
                made = _made_on_cpu(plan, site, leaf, 0, trace)
                if made is not None and id(made) not in seen:
                    seen.add(id(made))
                    name = leaf.value if isinstance(leaf, cst.Name) else _short(made)
                    placeable = not _has_device(made) and (
                        trace.owner is None or reads_take_any_device(plan, trace.scope, trace.owner)
                    )
                    found.append(Unplaced(name, made, reader, trace.stmt, trace.scope, placeable))
    return found


def _bound_output(site: CallSite) -> str | None:
    """``y_pred = model_0(X_train)``: the name the model's output is bound to."""
    stmt = site.stmt
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        assign = stmt.body[0]
        if assign.value is site.node and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
            return assign.targets[0].target.value
    return None


def _reads_output(plan: Plan, outer: CallSite, output: str, site: CallSite) -> bool:
    """Whether ``outer`` passes ``output`` as bound by ``site`` (its last binding before ``outer``)."""
    if not any(isinstance(a.value, cst.Name) and a.value.value == output for a in outer.node.args):
        return False
    order = plan.facts.order
    before = [b for b in outer.scope.bindings.get(output, []) if b.stmt in order and order[b.stmt][0] < order[outer.stmt][0]]
    return bool(before) and max(before, key=lambda b: order[b.stmt][0]).stmt is site.stmt


def _factory_chain(site: CallSite, expr: cst.BaseExpression) -> bool:
    """``torch.arange(...)`` or ``torch.arange(...).unsqueeze(1)``: a factory call under shape-keeping methods."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in SAME_DEVICE:
        expr = expr.func.value
    return isinstance(expr, cst.Call) and site.scope.imports.qualname(expr.func) in FACTORIES


def _operands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """``x * mask + noise``: x, mask and noise, each traced on its own."""
    if isinstance(expr, cst.BinaryOperation):
        return [*_operands(expr.left), *_operands(expr.right)]
    if isinstance(expr, cst.UnaryOperation):
        return _operands(expr.expression)
    return [expr]


class _Trace:
    """Where the traced tensor is made: the statement, its scope, and the name bound to it there (None when the
    model's call makes it in place)."""

    def __init__(self, stmt: cst.BaseStatement, scope: Scope) -> None:
        self.stmt, self.scope = stmt, scope
        self.owner: str | None = None


def _has_device(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, cst.Call):
        if any(a.keyword is not None and a.keyword.value == "device" for a in expr.args):
            return True
        expr = expr.func.value if isinstance(expr.func, cst.Attribute) else cst.Name("_")
    return False


def _made_on_cpu(plan: Plan, site: CallSite, expr: cst.BaseExpression, depth: int, trace: _Trace) -> cst.BaseExpression | None:
    """The factory call (or the binding's value holding it) that makes ``expr`` on the CPU, or None when
    ``expr`` is anything else: placed, of unknown origin, a batch."""
    if depth > 8:
        return None
    if isinstance(expr, cst.BinaryOperation):  # ``0.7 * X + 0.3``: on X's device
        for side in (expr.left, expr.right):
            made = _made_on_cpu(plan, site, side, depth + 1, trace)
            if made is not None:
                return made
        return None
    if isinstance(expr, cst.Call):
        func = expr.func
        if site.scope.imports.qualname(func) in FACTORIES:
            device = next((a.value for a in expr.args if a.keyword is not None and a.keyword.value == "device"), None)
            # ``device="cpu"``: the script asked for the CPU; it is reported, not moved
            return expr if device is None or is_cpu_device(device, site.scope.imports) else None
        if isinstance(func, cst.Attribute) and func.attr.value in SAME_DEVICE:
            inner = _made_on_cpu(plan, site, func.value, depth + 1, trace)
            # ``torch.arange(...).unsqueeze(1)`` is made as a whole; ``y_test.type(torch.float)`` where y_test is
            if inner is None:
                return None
            return expr if _factory_chain(site, func.value) else inner
        return None
    if isinstance(expr, cst.Subscript):  # ``X[:train_split]``: on X's device
        return _made_on_cpu(plan, site, expr.value, depth + 1, trace)
    if isinstance(expr, cst.Attribute) and expr.attr.value == "T":
        return _made_on_cpu(plan, site, expr.value, depth + 1, trace)
    if isinstance(expr, cst.Name):
        return _name_on_cpu(plan, site, expr.value, depth, trace)
    return None


def _name_on_cpu(plan: Plan, site: CallSite, name: str, depth: int, trace: _Trace) -> cst.BaseExpression | None:
    """``name`` as ``site`` reads it: a loop target over a CPU-made tensor, or the last binding before ``site``
    (in its scope, else the module's) whose value is made on the CPU."""
    loop: Loop | None = site.loop
    while loop is not None:
        if name in loop.targets:
            target = loop.node.target
            if isinstance(target, cst.Name) and target.value == name:
                trace.stmt, trace.scope, trace.owner = loop.node, loop.scope, name
                return _made_on_cpu(plan, site, loop.node.iter, depth + 1, trace)
            return None
        loop = loop.parent
    scope: Scope | None = site.scope
    order = plan.facts.order
    while scope is not None:
        bindings = scope.bindings.get(name)
        if bindings:
            before = [b for b in bindings if b.stmt in order and order[b.stmt][0] < order[site.stmt][0]]
            if scope is not site.scope:
                before = before or bindings
            if not before:
                return None
            last = max(before, key=lambda b: order[b.stmt][0])
            if last.value is None or last.unpacked is not None or last.aug or last.loop is not None:
                return None
            trace.stmt, trace.scope, trace.owner = last.stmt, scope, name
            return _made_on_cpu(plan, site, last.value, depth + 1, trace)
        if name in scope.param_names:
            return None
        scope = scope.parent if scope.kind != "class" else None
    return None


def _short(expr: cst.BaseExpression) -> str:
    """A readable name for a tensor made in place (``torch.ones(4, 2)``)."""
    return cst.Module(body=[]).code_for_node(expr)
