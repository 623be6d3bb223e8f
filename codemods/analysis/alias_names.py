"""Second names of an object to prepare: ``model = embedding_net`` bound before ``prepare``.

``prepare`` rebinds one name to the prepared object; any other name bound to the same object before it still holds
the bare one. When the training goes on through that other name (siamese-triplet's notebook trains ``model =
embedding_net`` after preparing ``embedding_net``), each process trains its own copy and the parameters drift
apart, with no error. Two answers, both decided here for the plan's prepare site:

- the first name is not read after the prepare point, the alias is: the alias is the name prepared (``model, ... =
  accelerator.prepare(model, ...)``), so the program goes on with the prepared object under the name it uses;
- both are read after it and the alias trains (it is called, or handed to a call that reaches ``backward``): the
  alias is bound again to the prepared object right after ``prepare`` (``model = embedding_net``).

A second name only read for its state (DeiT's ``model_without_ddp = model``, for ``state_dict()``) stays the bare
module on purpose: what ``unwrap_model`` would give.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.prepared_uses import PreparedUses as Plan
from accelify.codemods.analysis.roles import strip_placement


@dataclass(frozen=True)
class Rebind:
    """``alias = prepared`` to insert right after ``prepare``: ``alias`` trains and still held the bare object."""

    alias: str
    prepared: str


def second_names(plan: Plan, scope: Scope, alias: Alias, last: cst.BaseStatement | None) -> list[Binding]:
    """The plain bindings of ``scope`` (``model = embedding_net``) under another name than ``alias.key`` that hold
    ``alias.obj``, at or before ``last`` (where prepare goes), whose name is read after ``last``."""
    if last is None or alias.many or alias.obj.role != "model":
        return []
    end = plan.facts.order[last][1]
    found: dict[str, Binding] = {}
    for key, bindings in scope.bindings.items():
        if key == alias.key or "." in key:
            continue
        for binding in bindings:
            if binding.loop is not None or binding.unpacked is not None or binding.value is None \
                    or dotted(strip_placement(binding.value)) is None:
                continue
            if plan.facts.order[binding.stmt][0] <= end and plan.holds(binding) is alias.obj:
                found[key] = binding  # the last such binding of the name before prepare
        rebound = [b for b in bindings if plan.facts.order[b.stmt][0] > end]
        if key in found and (rebound or not read_after(plan, scope, key, end)):
            del found[key]  # bound to something else after prepare, or never used again
    return list(found.values())


def read_after(plan: Plan, scope: Scope, key: str, end: int) -> bool:
    """Whether ``key`` of ``scope`` is read after source position ``end``: in ``scope`` itself, or (any time) by a
    function nested in it that sees this binding (a helper reading the module's ``model``)."""
    for ref in scope.refs.get(key, []):
        holder = scope.holders.get(id(ref))
        if holder is not None and plan.facts.order[holder][0] > end:
            return True
    return any(
        other is not scope and other.inside(scope) and key in other.refs and other.resolve(key) is scope
        for other in plan.facts.scopes
    )


def trains_through(plan: Plan, scope: Scope, key: str, end: int) -> bool:
    """Whether ``key`` is called (``model(x)``) after ``end`` anywhere that sees it, or handed to a call after
    ``end`` that reaches ``backward`` (``fit(loader, model, ...)``)."""
    for site in plan.facts.calls:
        if site.scope is not scope and not (site.scope.inside(scope) and site.scope.resolve(key) is scope):
            continue
        if site.scope is scope and plan.facts.order[site.stmt][0] <= end:
            continue
        if dotted(site.node.func) == key:
            return True
        if any(dotted(a.value) == key for a in site.node.args) and plan.reaches_backward(site):
            return True
    return False


def follow_aliases(plan: Plan, scope: Scope, aliases: list[Alias],
                   last: cst.BaseStatement | None) -> tuple[list[Alias], list[Rebind]]:
    """``aliases`` with each model whose first name is done with before ``prepare`` prepared under the second
    name the program goes on with, and the second names that train beside a first name still in use."""
    out: list[Alias] = []
    rebinds: list[Rebind] = []
    end = plan.facts.order[last][1] if last is not None else 0
    for alias in aliases:
        seconds = second_names(plan, scope, alias, last)
        if seconds and not read_after(plan, scope, alias.key, end):
            chosen = seconds[-1]
            out.append(Alias(chosen.key, alias.obj, chosen.stmt, alias.many))
            seconds = [b for b in seconds if b is not chosen]
            prepared = chosen.key
        else:
            out.append(alias)
            prepared = alias.key
        rebinds.extend(Rebind(b.key, prepared) for b in seconds if trains_through(plan, scope, b.key, end))
        rebinds.extend(Rebind(key, prepared) for key in _attributes_training(plan, scope, alias, end))
    return out, rebinds


def _attributes_training(plan: Plan, scope: Scope, alias: Alias, end: int) -> list[str]:
    """``self.model`` where a trainer's method prepares the model under a local name (minGPT's ``model, config =
    self.model, self.config`` in ``Trainer.run``) but the loop after prepare runs ``self.model(x, y)``: that attribute
    trains and still holds the bare model, so it is bound to the prepared one too."""
    cls = scope.class_scope
    if cls is None or alias.obj.role != "model" or alias.key.startswith("self.") or alias.many:
        return []
    return [key for key, bindings in cls.bindings.items()
            if key.startswith("self.") and key.count(".") == 1
            and any(plan.holds(b) is alias.obj for b in bindings) and trains_through(plan, scope, key, end)]
