"""Values kept by calling a method of their holder: ``losses.append(loss.item())``, ``preds.extend(...)``,
``meter.update(v, n)``, ``seen.add(i)``, ``meters["loss"].update(v)``.

Such a statement changes what ``losses`` holds without assigning it. Two analyses must read it alike: the running
values over a prepared loader (``shard_sums.py``: a list appended at every batch is one process's share, ACC028 when
it cannot be gathered) and the agreement (``agreement.py``: what a process's own values went into may differ between
processes, so a test on ``np.mean(losses)`` is one only that process can decide). This is their one answer to
"which statement keeps which value in which holder".
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.facts import Binding, Facts
from accelify.codemods.analysis.names import dotted

KEEPING_METHODS = ("update", "append", "extend", "add", "insert")


@dataclass(frozen=True)
class KeptValue:
    """``call`` keeps ``values`` in the holder ``key`` (``losses``, ``self.history``); ``keyed`` when it is an
    element of it (``meters["loss"].update(v)``)."""

    key: str
    call: cst.Call
    values: tuple[cst.BaseExpression, ...]
    keyed: bool


def kept_value(stmt: cst.BaseStatement) -> KeptValue | None:
    """What ``stmt`` keeps, when it is one call statement ``holder.<method>(...)`` of ``KEEPING_METHODS`` on a name,
    ``self.x``, or an element of one of those; else None."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return None
    call = stmt.body[0].value
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in KEEPING_METHODS):
        return None
    holder = call.func.value
    keyed = isinstance(holder, cst.Subscript)
    key = dotted(holder.value if isinstance(holder, cst.Subscript) else holder)
    if key is None or key.count(".") > 1 or ("." in key and not key.startswith("self.")):
        return None
    return KeptValue(key, call, tuple(a.value for a in call.args), keyed)


def kept_bindings(facts: Facts) -> dict[tuple[int, str], list[Binding]]:
    """Each statement of the program that keeps a value in a holder, as the agreement reads it: an update of the
    holder (an augmented assignment of what it keeps, ``Binding.aug``), by the holder's owner scope and key (what a
    process's own values went into is that process's own too)."""
    found: dict[tuple[int, str], list[Binding]] = {}
    for site in facts.calls:
        kept = kept_value(site.stmt)
        if kept is None or kept.call is not site.node or not kept.values:
            continue
        head = kept.key.split(".")[0]
        owner = site.scope.class_scope if head == "self" else site.scope.resolve(head)
        if owner is None:
            continue
        value = cst.Tuple([cst.Element(v) for v in kept.values])
        binding = Binding(kept.key, value, site.stmt, owner, site.scope, kept.call.func, site.loop, aug=True)
        found.setdefault((id(owner), kept.key), []).append(binding)
    return found
