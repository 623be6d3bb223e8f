"""Whether a model method's results carry the autograd graph of the forward it runs.

A method such as a DQN's ``act`` runs the model's forward only to pick something from it: it returns
``self.forward(s).max(1)[1].data[0]``, an ``.argmax().item()``, or a random action, and no loss is computed from what
it returns. ``only_picks`` tells such a method from one whose result carries the graph (``self(x).pow(2).mean()``,
``dist.log_prob(a)`` of ``self.actor(s)``), following the method's own assignments back to the forward calls
(``self(...)``, ``self.forward(...)`` or a method or layer named in ``found``).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Scope

_DETACHING = frozenset({"item", "argmax", "argmin", "data", "detach", "numpy", "tolist", "multinomial"})


def only_picks(method: Scope, found: set[str], runs: set[cst.Call] | frozenset[cst.Call] = frozenset()) -> bool:
    """Whether every value ``method`` returns is cut from the graph: a DQN's ``act`` returns
    ``self.forward(s).max(1)[1].data[0]`` or a random action, which no loss is computed from. ``runs``: other calls
    of the method that run the model's layers (``layer.inverse(x)`` for ``layer in self.layers``)."""
    body = method.node.body  # type: ignore[attr-defined]
    returns = [r for r in m.findall(body, m.Return()) if isinstance(r, cst.Return)]
    if not returns or any(r.value is None for r in returns):
        return False  # (returning nothing: it acts through side effects, e.g. the loss kept on ``self``)
    assigned: dict[str, list[cst.BaseExpression]] = {}
    for assign in m.findall(body, m.Assign()):
        assert isinstance(assign, cst.Assign)
        for target in assign.targets:
            if isinstance(target.target, cst.Name):
                assigned.setdefault(target.target.value, []).append(assign.value)
            else:
                for name in m.findall(target.target, m.Name()):
                    assigned.setdefault(name.value, []).append(assign.value)  # type: ignore[attr-defined]
    for aug in m.findall(body, m.AugAssign(target=m.Name())):
        assert isinstance(aug, cst.AugAssign) and isinstance(aug.target, cst.Name)
        assigned.setdefault(aug.target.value, []).append(aug.value)  # ``log_prob += log_det``: it holds both
    for grow in m.findall(body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append") | m.Name("extend")))):
        assert isinstance(grow, cst.Call) and isinstance(grow.func, cst.Attribute) and isinstance(grow.func.value, cst.Name)
        for arg in grow.args:  # ``outs.append(head(x))``: the list holds what it is given
            assigned.setdefault(grow.func.value.value, []).append(arg.value)
    return all(_cut(r.value, assigned, found, frozenset(), runs) for r in returns if r.value is not None)


def _cut(expr: cst.BaseExpression, assigned: dict[str, list[cst.BaseExpression]], found: set[str],
         seen: frozenset[str], runs: set[cst.Call] | frozenset[cst.Call]) -> bool:
    """No gradient reaches ``expr``'s value: it is detached on its way out, or it holds no forward's output."""
    node = expr
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value in _DETACHING:
            return True
        if isinstance(node, cst.Subscript) and _picked_index(node):
            return True
        if isinstance(node, cst.Call):
            if m.matches(node.func, m.Name("int") | m.Name("float") | m.Name("bool")):
                return True
            node = node.func
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        else:
            break
    if isinstance(expr, cst.Name) and expr.value not in seen and expr.value in assigned:
        return all(_cut(v, assigned, found, seen | {expr.value}, runs) for v in assigned[expr.value])
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(_cut(e.value, assigned, found, seen, runs) for e in expr.elements)
    return not _holds_forward(expr, assigned, found, seen, runs)


def _picked_index(sub: cst.Subscript) -> bool:
    """``t.max(1)[1]``: the indices of a max, not its values."""
    value = sub.value
    return (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("max", "min")
            and len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index)
            and m.matches(sub.slice[0].slice.value, m.Integer("1")))


def _holds_forward(expr: cst.BaseExpression, assigned: dict[str, list[cst.BaseExpression]], found: set[str],
                   seen: frozenset[str], runs: set[cst.Call] | frozenset[cst.Call]) -> bool:
    """Whether ``expr`` mentions a forward of ``self`` or a name bound from one (not cut on the way)."""
    for call in m.findall(expr, m.Call()):
        func = call.func  # type: ignore[attr-defined]
        if call in runs or m.matches(func, m.Name("self")) or (
            m.matches(func, m.Attribute(value=m.Name("self"))) and (func.attr.value in ("forward", "__call__") or func.attr.value in found)
        ):
            return True
    for name in m.findall(expr, m.Name()):
        key = name.value  # type: ignore[attr-defined]
        if key not in seen and key in assigned and not all(_cut(v, assigned, found, seen | {key}, runs) for v in assigned[key]):
            return True
    return False
