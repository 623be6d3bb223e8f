"""A trainer method that prepares: the class's ``__init__`` binds some objects on ``self`` (the model), and one method,
run once from outside the class, trains with them and the objects it builds itself (the optimizer and loaders).

``Execute.train()`` in set H's FernandoLpz row: ``self.model = Net()`` in ``__init__``; ``train()`` builds the loaders
(as ``self.x`` or locals) and ``optimizer = RMSprop(self.model.parameters())``, then loops. That method holds all of
them through ``self``, so ``prepare`` goes there, after the last is built, and the accelerator first thing in
``__init__`` (``analysis/accelerator_home.py``). It is right only when the method runs once (prepared again, the model
would be wrapped again), when nothing else of the class trains (it would train the unprepared model, or prepare a
second time), and when the method's objects are bound nowhere else. ``why_not_once`` says which of these fails, so
the refusal names the method and the reason (ACC045) instead of ACC014's "no place holds them".
"""

from __future__ import annotations

from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.analysis.prepared_uses import Alias, PreparedUses

ROLES = ("model", "optimizer", "loader", "scheduler")


class TrainerMethod(PreparedUses):
    """Whether a method of a trainer class may hold ``prepare`` (``AcceleratorHome._constructed`` asks it)."""

    objects: list[Binding]  # the plan's objects to prepare

    def own_objects(self, method: Scope) -> bool:
        """Whether ``method`` builds one of the objects to prepare itself (a local or ``self.x``), outside any loop
        (a spare loader no loop walks does not make it a place to prepare)."""
        return any(b.role in ROLES and b.loop is None and b.where is method and b in self.objects
                   for bindings in [*method.bindings.values(), *self._self_bindings(method)] for b in bindings)

    def _self_bindings(self, method: Scope) -> list[list[Binding]]:
        cls = method.class_scope
        return list(cls.bindings.values()) if cls is not None else []

    def trains(self, method: Scope) -> bool:
        """Whether ``method`` runs a ``backward`` (itself or through a call)."""
        return any(self.reaches_backward(site) for site in method.calls)

    def why_not_once(self, method: Scope, init: Scope) -> str | None:
        """For ``method``, which builds objects of its own and uses those ``init`` bound: why ``prepare`` cannot go in
        it (a clause for ACC045's message), or None when it can."""
        cls = method.class_scope
        assert cls is not None
        sites = self.call_sites(method)
        if not sites:
            return "the program never calls it, so how often it runs is unknown"
        if len(sites) > 1:
            return (f"it is called {len(sites)} times, so `prepare` there would run at each call (on the same "
                    "instance, the model already prepared would be wrapped again)")
        site = sites[0]
        if site.scope.class_scope is cls:
            return f"it is called by `{cls.name}.{site.scope.name}`, not once from outside the class"
        looped = self._looped_caller(site, set())
        if looped is not None:
            return (f"it is called in a loop (in {looped}), so `prepare` there would run at every pass (on the same "
                    "instance, the model already prepared would be wrapped again)")
        for other in self.facts.scopes:
            if other.class_scope is cls and other is not method and other.name != "__init__" and any(
                    s.scope.class_scope is not cls for s in self.call_sites(other)) and any(
                    self.reaches_backward(s) for s in other.calls):
                return (f"`{cls.name}.{other.name}` trains too, called from outside the class: run before it, it "
                        "would train the model unprepared")
        for bindings in cls.bindings.values():
            for binding in bindings:
                builder = self.builder_call(binding.where) if binding.where is not init else None
                if binding.role is not None and binding.where not in (init, method) and (
                        builder is None or builder.scope is not init):
                    return (f"`{binding.key}` is also bound in `{cls.name}.{binding.where.name}`, where what it binds "
                            "would stay unprepared")
        return None

    def _looped_caller(self, site: CallSite, seen: set[int]) -> str | None:
        """Where ``site`` (or a call of the function it is in, up to the entry) runs in a loop: that scope's name."""
        if self.facts.looped(site):
            return "the module body" if site.scope.kind == "module" else f"`{site.scope.name}`"
        if site.scope.kind != "function" or id(site.scope) in seen:
            return None
        seen.add(id(site.scope))
        for caller in self.call_sites(site.scope):
            found = self._looped_caller(caller, seen)
            if found is not None:
                return found
        return None

    def method_holding(self, by_scope: dict[Scope, dict[int, Alias]],
                       required: list[Binding]) -> tuple[Scope, str] | None:
        """A method that holds every ``required`` object (the aliases ``by_scope`` found: its own, and what
        ``__init__`` bound on ``self``) but cannot prepare them: it and why not (ACC045). None when there is none."""
        for method, aliases in by_scope.items():
            cls = method.class_scope
            init = self.facts.function("__init__", cls) if cls is not None and method.name != "__init__" else None
            if init is None or not self.own_objects(method) or not self.trains(method):
                continue  # (a builder ``__init__`` calls under an ``if`` is ACC014's)
            both = set(aliases) | {i for i, a in by_scope.get(init, {}).items() if a.key.startswith("self.")}
            if all(id(o) in both for o in required):
                why = self.why_not_once(method, init)
                if why is not None:
                    return method, why
        return None
