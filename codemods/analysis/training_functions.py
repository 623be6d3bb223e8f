"""Several training functions, each preparing what it trains (the plan's decision 3, where no one scope holds every
object: ``prepare_site.py`` asks this before it gives up).

PyTorch's knowledge-distillation tutorial trains a teacher with ``train(teacher, loader, ...)`` and then a student
with ``train_knowledge_distillation(teacher, student, loader, ...)``: each function builds its own optimizer over the
model it is handed and walks the loader it is handed. No scope holds both optimizers, so the one ``prepare`` of the
plan has no place; but each function holds its own training whole, and Accelerate's ``prepare`` may be called once
per training: each function prepares its model, optimizer and loaders right after it has them (first thing, when it
is handed all of them), with the accelerator made in the one function that calls them all and passed to each.

Only where that is the whole story: every optimizer is built once (outside any loop) in a plain function (not a
method), the function holds every model that optimizer trains and every loader its own loops walk, it trains there,
no training function calls another, and every call of each is in the same scope. A scheduler is prepared with the
optimizer it wraps. Anything else is left to the plan's problems (ACC014 and the rest).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.blocks import common_block
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Scope
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.roles import strip_placement


@dataclass
class FunctionSite:
    """A training function that prepares its own objects: ``aliases`` after ``after`` in ``block`` (first thing in
    the function's body when ``after`` is None)."""

    scope: Scope
    block: list[cst.BaseStatement]
    after: cst.BaseStatement | None
    aliases: list[Alias]

    @property
    def names(self) -> set[str]:
        return {a.key for a in self.aliases}


class TrainingFunctions:
    """Mixed into ``PrepareSite`` (the facts, origins, ``trained_by``, ``call_sites`` and ``drives_training`` are the
    plan's: declared here they would hide the plan's own, which come later in its bases)."""

    facts: Facts
    function_sites: list[FunctionSite]

    def _training_functions(self, by_scope: dict[Scope, dict[int, Alias]],
                            required: list[Binding]) -> tuple[Scope, list[tuple[Scope, list[Alias]]]] | None:
        """The one scope that calls them all, and each training function with the aliases it prepares, in the order
        that scope calls them; None where the objects do not split that way."""
        optimizers = [o for o in required if o.role == "optimizer"]
        if len(optimizers) < 2:
            return None
        groups: dict[int, tuple[Scope, dict[int, Alias]]] = {}
        for optimizer in optimizers:
            scope = optimizer.where
            held = by_scope.get(scope, {})
            if scope.kind != "function" or scope.class_scope is not None or optimizer.loop is not None \
                    or id(optimizer) not in held or not any(self.reaches_backward(s) for s in scope.calls):
                return None
            _, group = groups.setdefault(id(scope), (scope, {}))
            group[id(optimizer)] = held[id(optimizer)]
            for where, owner in self.trained_by(optimizer):
                model = self.origin(where, owner)
                if model is None or id(model) not in held:
                    return None
                group[id(model)] = held[id(model)]
        if len(groups) < 2:
            return None
        for scope, group in groups.values():
            for loop in self.facts.loops:
                if loop.scope is not scope and not self._calls(scope, loop.scope):
                    continue  # (its own loops, and those of the helpers it calls: N9's one-epoch ``train_model``)
                for source in self.walked_sources(loop):
                    found = self.origin(scope, source)
                    if found is not None and found in required and found.role == "loader":
                        if id(found) not in by_scope.get(scope, {}):
                            return None
                        group[id(found)] = by_scope[scope][id(found)]
            for obj in required:
                if obj.role == "scheduler" and id(obj) in by_scope.get(scope, {}) and _wraps(self, obj, group):
                    group[id(obj)] = by_scope[scope][id(obj)]
        covered = {key for _, group in groups.values() for key in group}
        if any(id(o) not in covered for o in required):
            return None
        scopes = [scope for scope, _ in groups.values()]
        callers = {id(site.scope): site.scope for scope in scopes for site in self.call_sites(scope)}
        if len(callers) != 1 or any(not self.call_sites(s) for s in scopes) or any(
                self._calls(a, b) for a in scopes for b in scopes if a is not b):
            return None
        for scope, group in groups.values():
            if any(self.facts.looped(site) for site in self.call_sites(scope)) and any(
                    a.obj.role == "model" and a.obj.loop is None for a in group.values()):
                return None  # called per epoch with a model built once: an optimizer per epoch (the plan's ACC007)
        caller = next(iter(callers.values()))
        handed = any(a.stmt is None and a.obj.role == "model" for _, group in groups.values() for a in group.values())
        if caller.kind == "class" or (not handed and self._alternatives_of(caller, scopes)):
            return None  # (trainers a flag chooses, each building all it trains: ``trainer_choice.py``'s)
        first = {id(s): min(self.facts.order[site.stmt][0] for site in self.call_sites(s)) for s in scopes}
        ordered = sorted(groups.values(), key=lambda g: first[id(g[0])])
        rank = {role: i for i, role in enumerate(("model", "optimizer", "loader", "scheduler"))}
        return caller, [(scope, sorted(group.values(), key=lambda a: rank[a.obj.role or ""])) for scope, group in ordered]

    def _function_site(self, scope: Scope, aliases: list[Alias]) -> FunctionSite | None:
        """Where ``scope`` prepares ``aliases``: right after the last statement of its body that binds one, with no
        training before it; None where that place is not a plain statement of the body."""
        stmts = [a.stmt for a in aliases if a.stmt is not None]
        block = common_block(self.facts, scope, stmts)
        if block != scope.body:  # (``Scope.body`` is made anew at each read: compared by its statements)
            return None
        tops = [self.facts.top_in(s, block) for s in stmts]
        if any(t is None for t in tops):
            return None
        last = max(tops, key=block.index) if tops else None  # type: ignore[arg-type]
        if last is not None and any(self.drives_training(scope, s) for s in block[: block.index(last) + 1]):
            return None
        return FunctionSite(scope, block, last, aliases)

    def _alternatives_of(self, caller: Scope, scopes: list[Scope]) -> bool:
        """Whether two of ``scopes`` are called in different branches of one ``if`` of ``caller`` (trainers a flag
        chooses)."""
        sites = [(id(s), site.stmt) for s in scopes for site in self.call_sites(s)]
        block = common_block(self.facts, caller, [stmt for _, stmt in sites])
        tops = [(key, self.facts.top_in(stmt, block)) for key, stmt in sites]
        return any(a != b and top is other and isinstance(top, cst.If) for a, top in tops for b, other in tops)

    def _calls(self, caller: Scope, callee: Scope, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``caller`` runs ``callee``, directly or through the functions it calls."""
        for site in caller.calls:
            target = self.callee(site)
            if target is callee:
                return True
            if target is not None and id(target) not in seen and self._calls(target, callee, seen | {id(caller)}):
                return True
        return False


def _wraps(plan: TrainingFunctions, scheduler: Binding, group: dict[int, Alias]) -> bool:
    """Whether ``scheduler``'s first argument is an optimizer of ``group``."""
    core = strip_placement(scheduler.value) if scheduler.value is not None else None
    first = core.args[0].value if isinstance(core, cst.Call) and core.args else None
    found = plan.origin(scheduler.where, first) if first is not None else None
    return found is not None and id(found) in group
