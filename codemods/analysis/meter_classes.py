"""Which classes of a program are meters: an ``update`` that only adds what it is fed to attributes of its own.

``AverageMeter`` of the PyTorch ImageNet example sums ``self.sum += val * n`` and ``self.count += n``, computes
``self.avg = self.sum / self.count`` from the sums and keeps the last value ``self.val = val``; DeiT's ``SmoothedValue``
also keeps a window of the last values (``self.deque.append(value)``). Reducing the sums across processes and computing
the derived attributes again makes such a meter the whole data set's (``meter_sums.py``); the members a read may then
use are the sums, the derived attributes, and the properties that compute only from those (``global_avg``), never the
last values. Anything else in ``update`` (a call, a branch, a value it cannot follow) is not proven: None.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.plan import Plan

_ALLOWED_CALLS = ("max", "min", "float", "int")  # calls ``update`` and a reading property may make


@dataclass(frozen=True)
class MeterClass:
    """What ``update`` of a meter class does: the attributes it sums, and those it computes from the sums."""

    cls: Scope
    params: tuple[tuple[str, cst.BaseExpression | None], ...]  # update's parameters after ``self``, with defaults
    sums: dict[str, cst.BaseExpression]  # attribute -> what is added to it
    derived: tuple[tuple[str, cst.BaseExpression], ...]  # ``self.avg = self.sum / self.count``, in order
    readable: frozenset[str]  # members a read after the reduction may use: the sums, derived, and what reads only those


def meter_class(plan: Plan, cls: Scope) -> MeterClass | None:
    """``cls`` as a meter (see the module docstring), or None when its ``update`` is not proven to only add."""
    update = plan.classes.method(cls, "update")
    if update is None or not isinstance(update.node, cst.FunctionDef):
        return None
    params = update.node.params
    if params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or params.star_kwarg is not None or params.kwonly_params:
        return None
    names = [(p.name.value, p.default) for p in params.params]
    if not names or names[0][0] != "self":
        return None
    args = {n for n, _ in names[1:]}
    sums: dict[str, cst.BaseExpression] = {}
    derived: list[tuple[str, cst.BaseExpression]] = []
    local: set[str] = set()
    for stmt in _body(update.node):
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and _self_attr(small.target):
            if not _plain(small.value, args, set()) or small.target.attr.value in sums:  # type: ignore[attr-defined]
                return None
            sums[small.target.attr.value] = small.value  # type: ignore[attr-defined]
        elif isinstance(small, cst.Expr) and m.matches(small.value, m.Call(func=m.Attribute(attr=m.Name("append")), args=[m.Arg()])) \
                and _self_attr(small.value.func.value) and _plain(small.value.args[0].value, args, set()):  # type: ignore[attr-defined]
            local.add(small.value.func.value.attr.value)  # type: ignore[attr-defined]  # a window of the last values
        elif isinstance(small, cst.Assign) and len(small.targets) == 1 and _self_attr(small.targets[0].target):
            attr = small.targets[0].target.attr.value  # type: ignore[attr-defined]
            if _plain(small.value, set(), set(sums)):
                derived.append((attr, small.value))
            elif _plain(small.value, args, set(sums)):
                local.add(attr)
            else:
                return None
        else:
            return None
    if not sums or not _starts_at_numbers(cls, set(sums)) or set(sums) & ({a for a, _ in derived} | local):
        return None
    readable = set(sums) | {a for a, _ in derived}
    for member in cls.node.body.body if isinstance(cls.node.body, cst.IndentedBlock) else ():
        if isinstance(member, cst.FunctionDef) and member.name.value not in ("update", "__init__", "reset") \
                and _reads_only(member, readable):
            readable.add(member.name.value)
    return MeterClass(cls, tuple(names[1:]), sums, tuple(derived), frozenset(readable - local))


def _body(function: cst.FunctionDef) -> list[cst.BaseStatement]:
    """The statements of ``function`` after its docstring."""
    body = list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
    if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])):
        body = body[1:]
    return body  # type: ignore[return-value]


def _self_attr(node: cst.BaseExpression) -> bool:
    return m.matches(node, m.Attribute(value=m.Name("self"), attr=m.Name()))


def _plain(expr: cst.BaseExpression, params: set[str], attrs: set[str]) -> bool:
    """Arithmetic of ``params``, ``self.<attrs>``, numbers and the allowed builtins only (no side effects)."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in params
    if _self_attr(expr):
        return expr.attr.value in attrs  # type: ignore[attr-defined]
    if isinstance(expr, cst.BinaryOperation):
        return _plain(expr.left, params, attrs) and _plain(expr.right, params, attrs)
    if isinstance(expr, cst.UnaryOperation):
        return _plain(expr.expression, params, attrs)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in _ALLOWED_CALLS:
        return all(a.keyword is None and not a.star and _plain(a.value, params, attrs) for a in expr.args)
    return False


def _reads_only(method: cst.FunctionDef, attrs: set[str]) -> bool:
    """A property or method with only ``self`` that returns arithmetic of ``attrs`` (``global_avg``)."""
    if len(method.params.params) != 1 or method.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT):
        return False
    if any(not m.matches(d.decorator, m.Name("property")) for d in method.decorators):
        return False
    body = _body(method)
    return len(body) == 1 and m.matches(body[0], m.SimpleStatementLine([m.Return()])) \
        and body[0].body[0].value is not None and _plain(body[0].body[0].value, set(), attrs)  # type: ignore[attr-defined]


def _starts_at_numbers(cls: Scope, sums: set[str]) -> bool:
    """Whether every summed attribute is set outside ``update`` only to numbers (``self.sum, self.count = 0.0, 0``)."""
    set_to: dict[str, list[cst.BaseExpression]] = {}
    for node in m.findall(cls.node, m.Assign()):
        for target in node.targets:  # type: ignore[attr-defined]
            pairs = [(target.target, node.value)]  # type: ignore[attr-defined]
            if isinstance(target.target, cst.Tuple) and isinstance(node.value, cst.Tuple) \
                    and len(target.target.elements) == len(node.value.elements):  # type: ignore[attr-defined]
                pairs = [(t.value, v.value) for t, v in zip(target.target.elements, node.value.elements)]  # type: ignore[attr-defined]
            elif isinstance(target.target, cst.Tuple):
                pairs = [(t.value, None) for t in target.target.elements]  # type: ignore[misc]
            for attr, value in pairs:
                if _self_attr(attr) and attr.attr.value in sums:  # type: ignore[attr-defined]
                    set_to.setdefault(attr.attr.value, []).append(value)  # type: ignore[arg-type, attr-defined]
    return all(set_to.get(a) and all(isinstance(v, (cst.Integer, cst.Float)) for v in set_to[a]) for a in sums)


def adds_to_self(plan: Plan, cls: Scope) -> bool:
    """Whether ``update`` of ``cls`` adds to an attribute of its own (``self.sum += val * n``), proven a meter or not."""
    update = plan.classes.method(cls, "update")
    if update is None or not isinstance(update.node, cst.FunctionDef):
        return False
    return any(_self_attr(a.target) for a in m.findall(update.node.body, m.AugAssign(operator=m.AddAssign())))  # type: ignore[attr-defined]
