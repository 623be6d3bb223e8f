"""Running sums kept in a dict over a loop: ``metrics['loss'] += loss.item() * n`` in the loop, or in a helper the
loop passes the dict to (``calc_loss(outputs, labels, metrics)``, usuyama's U-Net notebook). ``shard_sums`` decides
whether one can be reduced across processes (key by key) or is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.flow import Flow


@dataclass(frozen=True)
class KeyedSum:
    """``name[key] += value`` over ``loop``: where (``stmt``), what is added, and under which keys."""

    name: str
    stmt: cst.BaseStatement
    values: tuple[cst.BaseExpression, ...]
    keys: tuple[str, ...]  # empty when a key is not a string written out (``metrics[k] += ...``)
    local: bool  # summed in a helper: the values are the process's own


def keyed_sums(flow: Flow, loop: Loop) -> list[KeyedSum]:
    """The dicts the loop's own body or a helper it calls sums into, one entry per dict."""
    found: dict[str, KeyedSum] = {}
    for stmt in loop.stmts:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
            small = stmt.body[0]
            if (isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
                    and isinstance(small.target, cst.Subscript) and isinstance(small.target.value, cst.Name)):
                _add(found, KeyedSum(small.target.value.value, stmt, (small.value,), _keys([small.target]), False))
    for site in loop.calls:
        function = flow.callee(site)
        if function is None or (site.loop is not loop and (site.loop is None or site.loop.node not in _inner(loop))):
            continue
        for arg in site.node.args:
            if not isinstance(arg.value, cst.Name) or arg.star:
                continue
            param = next((p for p in function.param_names if flow.arg_for(site, function, p) is arg), None)
            targets = [
                a.target for a in m.findall(function.node, m.AugAssign())
                if isinstance(a, cst.AugAssign) and isinstance(a.target, cst.Subscript)
                and m.matches(a.target.value, m.Name(param)) and isinstance(a.operator, cst.AddAssign)
            ] if param is not None else []
            if targets:
                _add(found, KeyedSum(arg.value.value, site.stmt, (site.node,), _keys(targets), True))
    return list(found.values())


def _add(found: dict[str, KeyedSum], new: KeyedSum) -> None:
    old = found.get(new.name)
    if old is None:
        found[new.name] = new
        return
    keys = tuple(dict.fromkeys(old.keys + new.keys)) if old.keys and new.keys else ()
    found[new.name] = KeyedSum(new.name, old.stmt, old.values + new.values, keys, old.local or new.local)


def _keys(targets: list[cst.Subscript]) -> tuple[str, ...]:
    """``('bce', 'dice', 'loss')`` when every subscript is one string written out, else ``()``."""
    keys: list[str] = []
    for target in targets:
        index = target.slice[0].slice if len(target.slice) == 1 else None
        if not (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)):
            return ()
        key = index.value.evaluated_value
        if not isinstance(key, str):
            return ()
        keys.append(key)
    return tuple(dict.fromkeys(keys))


def _inner(loop: Loop) -> set[cst.CSTNode]:
    return set(m.findall(loop.node.body, m.For() | m.While()))
