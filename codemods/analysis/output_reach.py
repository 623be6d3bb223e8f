"""Whether what a call returns can reach a ``backward``: the question ACC025 asks of a model's own method.

A model's method that runs its forward itself (``vae.inference(z)``, ``model.sample(n)``) bypasses the
DistributedDataParallel wrapper; that matters only when gradients flow from its output to a ``backward`` (a loss
computed from it). A sample decoded for a figure or a print, whose value only ever reaches ``print``, ``.item()``,
``save_image`` or a list of frames, trains nothing.

The value is followed forward through the statements of the scope the call is in (in any order, as a loop carries
values from one pass to the next): a name, ``self.x`` or container assigned from an expression that holds it, a
list it is appended to, a ``for`` over it. It stops at what cuts the graph (``.detach()``, ``.item()``, ``.data``,
``.tolist()``, ``.numpy()``). It reaches a backward when a ``backward`` call (``loss.backward()``,
``torch.autograd.backward/grad``) or a function of the program that makes one is handed a value that holds it; and,
returned by a function, when a caller's value of that call does.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan

# methods and attributes whose result carries no gradient back to the value they are taken of
_CUTS = ("detach", "item", "tolist", "numpy", "detach_")
# methods that put their argument into the container they are called on
_STORES = ("append", "extend", "insert", "add", "update", "setdefault", "put")
_DEPTH = 3  # how many returns to follow into callers


def output_reaches_backward(plan: Plan, site: CallSite, depth: int = 0) -> bool:
    """Whether the value ``site`` returns can reach a ``backward`` (see the module docstring)."""
    scope = site.scope
    tainted = _tainted(scope, site.node)
    holds = _Holds(site.node, tainted)
    for other in scope.calls:
        if other is site or not _handed(other.node, holds):
            continue
        if other.method in ("backward", "grad") or plan.reaches_backward(other):
            return True
    if scope.kind == "function" and depth < _DEPTH:
        if any(r.value is not None and holds(r.value) for r in scope.returns):
            return any(output_reaches_backward(plan, caller, depth + 1) for caller in plan.call_sites(scope))
    return False


class _Holds:
    """Whether an expression holds the call's value, with gradients: the call itself, or a tainted name or key,
    outside the parts that cut the graph."""

    def __init__(self, call: cst.Call, tainted: set[str]) -> None:
        self.call = call
        self.tainted = tainted

    def __call__(self, node: cst.CSTNode) -> bool:
        if node is self.call:
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _CUTS:
            return any(self(a.value) for a in node.args)
        if isinstance(node, cst.Attribute):
            if node.attr.value == "data":
                return False
            key = dotted(node)
            if key is not None and key in self.tainted:
                return True
            return self(node.value)
        if isinstance(node, cst.Name):
            return node.value in self.tainted
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return False
        return any(self(child) for child in node.children)


def _handed(call: cst.Call, holds: _Holds) -> bool:
    """``loss.backward()`` of a held ``loss``, or a held value among the call's arguments."""
    func = call.func
    if isinstance(func, cst.Attribute) and holds(func.value):
        return True
    return any(holds(a.value) for a in call.args)


def _tainted(scope: Scope, call: cst.Call) -> set[str]:
    """The names and keys (``self.samples``) of ``scope`` that come to hold ``call``'s value."""
    tainted: set[str] = set()
    holds = _Holds(call, tainted)
    changed = True
    while changed:
        changed = False
        for node in _statements(scope.body):
            for key in _bound_from(node, holds):
                if key not in tainted:
                    tainted.add(key)
                    changed = True
    return tainted


def _bound_from(node: cst.CSTNode, holds: _Holds) -> Iterator[str]:
    """The keys ``node`` (a small statement or a compound statement's header) binds to a held value."""
    if isinstance(node, cst.Assign) and holds(node.value):
        for target in node.targets:
            yield from _keys(target.target)
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.value is not None and holds(node.value):
        yield from _keys(node.target)
    elif isinstance(node, cst.For) and holds(node.iter):
        yield from _keys(node.target)
    elif isinstance(node, cst.With):
        for item in node.items:
            if item.asname is not None and holds(item.item):
                yield from _keys(item.asname.name)
    elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
        func = node.value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _STORES and any(holds(a.value) for a in node.value.args):
            yield from _keys(func.value)
    if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr)):
        for walrus in _walruses(node):
            if holds(walrus.value):
                yield from _keys(walrus.target)


def _keys(target: cst.BaseExpression) -> Iterator[str]:
    """``x`` of ``x``, ``x[i]`` and ``x.y`` (as ``x.y``); each name of a tuple or list target."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _keys(element.value)
        return
    if isinstance(target, cst.StarredElement):
        yield from _keys(target.value)
        return
    while isinstance(target, cst.Subscript):
        target = target.value
    key = dotted(target)
    if key is not None:
        yield key


def _walruses(node: cst.CSTNode) -> Iterator[cst.NamedExpr]:
    if isinstance(node, cst.NamedExpr):
        yield node
    for child in node.children:
        yield from _walruses(child)


def _statements(body: list[cst.BaseStatement]) -> Iterator[cst.CSTNode]:
    """Every small statement and compound statement of ``body``, through blocks, not into nested functions or
    classes (scopes of their own)."""
    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(stmt, cst.SimpleStatementLine):
            yield from stmt.body
            continue
        yield stmt
        for block in _blocks(stmt):
            yield from _statements(block)


def _blocks(stmt: cst.CSTNode) -> Iterator[list[cst.BaseStatement]]:
    for name in ("body", "orelse", "finalbody"):
        part = getattr(stmt, name, None)
        if isinstance(part, cst.IndentedBlock):
            yield list(part.body)
        elif isinstance(part, cst.SimpleStatementSuite):  # ``if x: y = f()`` on one line
            yield [cst.SimpleStatementLine(body=part.body)]
        elif isinstance(part, (cst.Else, cst.Finally)) and isinstance(part.body, cst.IndentedBlock):
            yield list(part.body.body)
        elif isinstance(part, cst.If):  # elif
            yield from _blocks_of_if(part)
    for handler in getattr(stmt, "handlers", ()):
        if isinstance(handler.body, cst.IndentedBlock):
            yield list(handler.body.body)


def _blocks_of_if(stmt: cst.If) -> Iterator[list[cst.BaseStatement]]:
    yield [stmt]
