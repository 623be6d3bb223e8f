"""Whether what a call returns can reach a ``backward``: the question ACC025 asks of a model's own method.

A model's method that runs its forward itself (``vae.inference(z)``, ``model.sample(n)``) bypasses the
DistributedDataParallel wrapper; that matters only when gradients flow from its output to a ``backward`` (a loss
computed from it). A sample decoded for a figure or a print, whose value only ever reaches ``print``, ``.item()``,
``save_image`` or a list of frames, trains nothing.

The value is followed forward through the statements of the scope the call is in (in any order, as a loop carries
values from one pass to the next; but a name a loop around the binding rebinds at each pass, as ``x`` of ``for x, y
in loader`` rebound by ``x = vae.inference(z)`` for a figure, holds it only in what follows in that pass): a name,
``self.x`` or container assigned from an expression that holds it, a list it is appended to, a ``for`` over it. It
stops at what cuts the graph (``.detach()``, ``.item()``, ``.data``, ``.tolist()``, ``.numpy()``). It reaches a
backward when a ``backward`` call (``loss.backward()``, ``torch.autograd.backward/grad``) or a function of the
program that makes one is handed a value that holds it; and, returned by a function, when a caller's value of that
call does.
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
    walk = _Walk(scope.body)
    holds = _Holds(site.node, _tainted(walk, site.node))
    for other in scope.calls:
        at = walk.index.get(id(other.stmt), _LAST)
        if other is site or not _handed(other.node, holds, at):
            continue
        if other.method in ("backward", "grad") or plan.reaches_backward(other):
            return True
    if scope.kind == "function" and depth < _DEPTH:
        for line, small in walk.entries:
            if isinstance(small, cst.Return) and small.value is not None and holds(small.value, walk.index[id(line)]):
                return any(output_reaches_backward(plan, caller, depth + 1) for caller in plan.call_sites(scope))
    return False


_LAST = 1 << 30  # a statement the walk does not index (in a nested function): every value reaches it


class _Holds:
    """Whether an expression read at a statement's position holds the call's value, with gradients: the call itself,
    or a name or key tainted by then, outside the parts that cut the graph."""

    def __init__(self, call: cst.Call, tainted: dict[str, int]) -> None:
        self.call = call
        self.tainted = tainted  # key -> the first position that reads it tainted

    def __call__(self, node: cst.CSTNode, at: int) -> bool:
        if node is self.call:
            return True
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _CUTS:
            return any(self(a.value, at) for a in node.args)
        if isinstance(node, cst.Attribute):
            if node.attr.value == "data":
                return False
            key = dotted(node)
            if key is not None and self.tainted.get(key, _LAST + 1) <= at:
                return True
            return self(node.value, at)
        if isinstance(node, cst.Name):
            return self.tainted.get(node.value, _LAST + 1) <= at
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            return False
        return any(self(child, at) for child in node.children)


def _handed(call: cst.Call, holds: _Holds, at: int) -> bool:
    """``loss.backward()`` of a held ``loss``, or a held value among the call's arguments."""
    func = call.func
    if isinstance(func, cst.Attribute) and holds(func.value, at):
        return True
    return any(holds(a.value, at) for a in call.args)


def _tainted(walk: "_Walk", call: cst.Call) -> dict[str, int]:
    """The names and keys (``self.samples``) of the walked scope that come to hold ``call``'s value, each with the
    first position that reads it so. A name a loop enclosing the binding rebinds at each pass (``x`` of ``for x, y in
    loader``, rebound by ``x = vae.inference(z)`` for a figure) holds it only from there on in source order: the next
    pass takes a new batch; any other name holds it everywhere (a value carried from one pass to the next)."""
    tainted: dict[str, int] = {}
    holds = _Holds(call, tainted)
    changed = True
    while changed:
        changed = False
        for line, node in walk.entries:
            at = walk.index[id(line)]
            for key in _bound_from(node, holds, at):
                start = at if key in walk.loop_targets[id(line)] else 0
                if tainted.get(key, _LAST + 1) > start:
                    tainted[key] = start
                    changed = True
    return tainted


def _bound_from(node: cst.CSTNode, holds: _Holds, at: int) -> Iterator[str]:
    """The keys ``node`` (a small statement or a compound statement's header) binds to a held value."""
    if isinstance(node, cst.Assign) and holds(node.value, at):
        for target in node.targets:
            yield from _keys(target.target)
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.value is not None and holds(node.value, at):
        yield from _keys(node.target)
    elif isinstance(node, cst.For) and holds(node.iter, at):
        yield from _keys(node.target)
    elif isinstance(node, cst.With):
        for item in node.items:
            if item.asname is not None and holds(item.item, at):
                yield from _keys(item.asname.name)
    elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
        func = node.value.func
        if isinstance(func, cst.Attribute) and func.attr.value in _STORES and any(holds(a.value, at) for a in node.value.args):
            yield from _keys(func.value)
    if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr)):
        for walrus in _walruses(node):
            if holds(walrus.value, at):
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


class _Walk:
    """The statements of a scope's body in source order, through blocks, not into nested functions or classes
    (scopes of their own): ``entries`` pairs each small statement, or compound statement (its header), with the
    statement line or compound statement that holds it; ``index`` gives each of those its position, and
    ``loop_targets`` the names the ``for`` loops around it rebind at each pass."""

    def __init__(self, body: list[cst.BaseStatement]) -> None:
        self.entries: list[tuple[cst.BaseStatement, cst.CSTNode]] = []
        self.index: dict[int, int] = {}
        self.loop_targets: dict[int, set[str]] = {}
        self._walk(body, frozenset())

    def _walk(self, body: list[cst.BaseStatement], targets: frozenset[str]) -> None:
        for stmt in body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                continue
            self.index[id(stmt)] = len(self.index)
            self.loop_targets[id(stmt)] = set(targets)
            if isinstance(stmt, cst.SimpleStatementLine):
                self.entries += [(stmt, small) for small in stmt.body]
                continue
            self.entries.append((stmt, stmt))
            inner = targets | set(_keys(stmt.target)) if isinstance(stmt, cst.For) else targets
            for block in _blocks(stmt):
                self._walk(block, inner)


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
