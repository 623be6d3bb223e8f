"""Where ``prepare`` goes (the plan's decision 3; where the ``Accelerator`` is created, decision 4, is
``analysis/accelerator_home.py``).

The prepare site is the scope closest to the entry point that holds every object to prepare as a name (a
parameter, a local, ``self.x``), in the innermost block that binds them all, right after the last (or after a
per-epoch scheduler that reads a prepared loader's length right after them); experiments one after another are each
prepared where they are built. The home is the prepare scope, or the caller that built some
of the objects and passed them in. What cannot be placed is recorded as a ``Problem``.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.accelerator_home import AcceleratorHome
from accelify.codemods.analysis.alias_names import Rebind, follow_aliases
from accelify.codemods.analysis.blocks import common_block
from accelify.codemods.analysis.branch_sites import BranchSites, branch_test
from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.problems import (
    BUILT_ELSEWHERE,
    CREATED_AFTER_LOOP,
    HELD_BY_A_METHOD,
    MODEL_IN_LOOP,
    REBUILT_BY_A_METHOD,
    SECOND_EXPERIMENT,
    SEVERAL_TRAINERS,
    TRAININGS_IN_BRANCHES,
)
from accelify.codemods.analysis.roles import classify, removed_wrap, same_module, strip_placement
from accelify.codemods.analysis.training_functions import FunctionSite, TrainingFunctions

PREPARED_ROLES = ("model", "optimizer", "loader", "scheduler")
# ACC039's ``why`` when a run of the program may build several trainers (``engine/alternatives.py`` has the others)
SEVERAL_RUN = ("and a run of the program may build more than one of them: one `accelerator.prepare` cannot serve "
               "several trainings, and one process has one accelerator")


class PrepareSite(BranchSites, TrainingFunctions, AcceleratorHome):
    """The plan's choice of the prepare site (``Plan`` mixes it in, and the accelerator's home with it:
    ``analysis/accelerator_home.py``; the objects, their roles and the problems list are the plan's, as are
    ``trained_by`` and ``_problem``)."""

    objects: list[Binding]
    in_place: list[Binding]
    _optional: set[int]
    _walked_whole_elsewhere: Callable[[Binding, Scope], bool]
    prepare_scope: Scope | None
    prepare_block: list[cst.BaseStatement]
    prepare_after: cst.BaseStatement | None
    aliases: list[Alias]
    rebinds: list[Rebind]  # second names that train, bound again to the prepared object right after prepare
    trainers: list[Scope]
    pass_loops: set[int]  # the ``for`` nodes each pass of which trains a model of its own (``Plan._trains_per_pass``)
    function_sites: list[FunctionSite]  # other training functions, each preparing its own (``training_functions.py``)

    def _choose_prepare_site(self) -> None:
        by_scope: dict[Scope, dict[int, Alias]] = {}
        for binding in self.facts.bindings():
            looped = binding.loop is not None and id(binding.loop.node) not in self.pass_loops  # (a k-fold pass: prepared in it)
            if binding.role == "device" or looped or removed_wrap(binding, binding.where.imports):
                continue
            held = self.holds(binding)
            if held is not None and held in self.objects:
                aliases = by_scope.setdefault(binding.where, {})
                previous = aliases.get(id(held))
                # the first name that holds it (``model``, not a later ``model_without_ddp = model``), bound last
                later = previous is not None and previous.stmt is not None and self.facts.order[previous.stmt] < self.facts.order[binding.stmt]
                if later and self.drives_training(binding.where, binding.stmt):
                    continue  # ``model = train_model(model, ...)``: what the training returns, not a place to prepare
                if later and self._after_training(binding.where, binding.stmt):
                    continue  # ``model = load_best_model()`` once the training is over (set U's U13): not trained
                if previous is None or previous.stmt is None or (later and previous.key == binding.key):
                    aliases[id(held)] = Alias(binding.key, held, self._completed(binding), binding.many)
        self._held_by_objects(by_scope)
        self._held_as_parts(by_scope)
        for scope in self.facts.scopes:
            if scope.kind != "function":
                continue
            for name in scope.param_names:
                if name in scope.bindings and not all(removed_wrap(b, scope.imports) or _itself(b, name)
                                                      for b in scope.bindings[name]):
                    continue  # (``model = DDP(model)``, ``model = model.train()`` in ``train(model)`` still hold it)
                held = self.param_origin(scope, name)
                if held is not None and held in self.objects:
                    by_scope.setdefault(scope, {}).setdefault(id(held), Alias(name, held, None))
        self._fold_builders(by_scope)
        self._alternatives(by_scope)
        required = [o for o in self.objects if id(o) not in self._optional and o not in self.in_place]
        candidates = [s for s, aliases in by_scope.items() if all(id(o) in aliases for o in required)]
        found = self._training_functions(by_scope, required) if not candidates else None
        if found is not None:
            caller, groups = found
            sites = [self._function_site(scope, aliases) for scope, aliases in groups[1:]]
            if all(site is not None for site in sites):
                held = {id(a.obj) for _, aliases in groups for a in aliases} | {id(o) for o in self.in_place}
                self.objects = [o for o in self.objects if id(o) in held]
                scope, aliases = groups[0]
                self._place_prepare(scope, aliases)
                if self.prepare_scope is not None:
                    self.function_sites = [s for s in sites if s is not None]
                    self.function_caller = caller
                return
        if not candidates:
            first = required[0]
            missing = [o for o in required if all(id(o) not in a for a in by_scope.values() if id(first) in a)]
            culprit = (missing or required)[0]
            trainers = self._several_trainers(required)
            rebuilt = self._rebuilt(by_scope, required)
            if rebuilt is not None:
                builder, site, key = rebuilt
                self._problem(REBUILT_BY_A_METHOD, site.node, builder=_scope_name(builder), name=key,
                              caller=_scope_name(site.scope))
            elif (again := self._built_per_call(required)) is not None:
                # wide-resnet's ``train(epoch)`` builds ``optimizer = optim.SGD(net.parameters(), lr=lr(epoch))`` at
                # every call, once per epoch: the optimizer is made in a loop, only through a call
                self._problem(MODEL_IN_LOOP, again.stmt, name=again.key)
            elif trainers:
                self.trainers = trainers
                names = ", ".join(f"`{_scope_name(t)}`" for t in trainers)
                self._problem(SEVERAL_TRAINERS, culprit.stmt, names=names, why=SEVERAL_RUN)
            elif (holder := self.method_holding(by_scope, required)) is not None:
                method, why = holder  # ``train(self)`` builds what the model of ``__init__`` needs, but runs per epoch
                self._problem(HELD_BY_A_METHOD, method.node, name=_scope_name(method), why=why)
            else:
                self._problem(BUILT_ELSEWHERE, culprit.stmt, name=culprit.key)
            return
        scope = self._run_method(self._shallowest(candidates), candidates, by_scope)
        if (why := self._not_run_once(scope, by_scope[scope])) is not None:
            self._problem(HELD_BY_A_METHOD, scope.node, name=_scope_name(scope), why=why)
            return
        aliases = list(by_scope[scope].values())
        aliases = [a for a in aliases if a.obj not in self.in_place
                   and not (id(a.obj) in self._optional and self._walked_whole_elsewhere(a.obj, scope))]
        held = {id(a.obj) for a in aliases} | {id(o) for o in self.in_place}
        self.objects = [o for o in self.objects if id(o) in held]  # loaders no one iterates, out of reach: left alone
        self._place_prepare(scope, aliases)

    def _run_method(self, scope: Scope, candidates: list[Scope], by_scope: dict[Scope, dict[int, Alias]]) -> Scope:
        """``scope``, or, where it is a trainer's ``__init__`` that holds the model and optimizer, the one method of
        that class, run once from outside it, that also builds the loader it trains on (minGPT's ``Trainer.run``
        with the optimizer made in ``__init__``: an endless ``DataLoader`` no ``for`` walks, ``next(iter(loader))``,
        which ``__init__`` never holds): prepared there, after the loader, the loader is sharded too."""
        if scope.name != "__init__" or scope.class_scope is None:
            return scope
        # (an endless loader is walked through ``iter(train_loader)``; a spare one nothing walks stays out)
        loaders = [o for o in self.objects if o.role == "loader" and id(o) in self._optional and any(
            dotted(site.node.func) == "iter" and len(site.node.args) == 1 and dotted(site.node.args[0].value) == o.key
            for site in o.where.calls)]
        for method in candidates:
            held = by_scope[method]
            if method is not scope and method.class_scope is scope.class_scope and self._constructed(method) is scope \
                    and any(o.where is method and id(o) in held and id(o) not in by_scope[scope] for o in loaders):
                return method
        return scope

    def _not_run_once(self, scope: Scope, aliases: dict[int, Alias]) -> str | None:
        """Why a trainer's method that builds the optimizer or loader itself, for a model it was not built in (handed
        to ``__init__``), cannot prepare them (``why_not_once``: ``run_epoch()`` called once per epoch would prepare,
        and wrap the model, again at every call); None where it can, or where ``scope`` is no such method."""
        cls = scope.class_scope
        init = self.facts.function("__init__", cls) if cls is not None and scope.name != "__init__" else None
        if init is None or not self.own_objects(scope) or not self.trains(scope):
            return None
        if not any(a.obj.role == "model" and a.obj.where is not scope for a in aliases.values()):
            return None  # (a method that builds its model too: as before)
        return self.why_not_once(scope, init)

    def _alternatives(self, by_scope: dict[Scope, dict[int, Alias]]) -> None:
        """A name that holds an object built in another scope (``model, optimizer = build(version)``, ``build``
        making them in one ``if/elif`` arm per version and returning them) holds whichever of that scope's objects
        of the same name and role was bound last there: it holds them all, and is prepared once for all of them."""
        for scope, aliases in by_scope.items():
            for alias in list(aliases.values()):
                held = alias.obj
                if held.where is scope:
                    continue
                for other in self.objects:
                    if other.where is held.where and other.key == held.key and other.role == held.role:
                        aliases.setdefault(id(other), Alias(alias.key, other, alias.stmt, alias.many))

    def _after_training(self, scope: Scope, stmt: cst.BaseStatement) -> bool:
        """Whether ``stmt`` comes after a statement of its block that trains, and nothing after it in that block does."""
        parent = self.facts.parent_stmt.get(stmt)
        suite = getattr(parent, "body", None) if parent is not None else None
        block = list(suite.body) if isinstance(suite, cst.IndentedBlock) else list(scope.body) if parent is None else []
        if stmt not in block:
            return False
        at = block.index(stmt)
        return any(self.drives_training(scope, s) for s in block[:at]) \
            and not any(self.drives_training(scope, s) for s in block[at + 1:])

    def _held_by_objects(self, by_scope: dict[Scope, dict[int, Alias]]) -> None:
        """``self.data_loader = MnistDataLoader(config)`` whose ``__init__`` sets ``self.train_loader = DataLoader(...)``:
        the scope that builds the helper object holds its loader as ``self.data_loader.train_loader`` right after that
        statement (prepare assigns the prepared one back to the attribute, where the training reads it). Only where a
        loop walks that attribute itself: an object that wraps its loader (``self.data_iter = iter(self.loader)``) and
        hands out batches keeps the one it wrapped."""
        walked = {(id(loop.scope.class_scope or loop.scope), dotted(source)) for loop in self.facts.loops
                  for source in self.walked_sources(loop)}
        for binding in self.facts.bindings():
            if binding.role is not None or binding.value is None or binding.loop is not None or binding.key.count(".") > 1:
                continue
            init = self.constructed_init(binding.value)
            if init is None or not isinstance(binding.stmt, cst.SimpleStatementLine):
                continue
            for key in init.class_scope.bindings:  # type: ignore[union-attr]
                if not key.startswith("self.") or key.count(".") != 1:
                    continue
                nested = f"{binding.key}.{key[5:]}"
                if (id(binding.where.class_scope or binding.where), nested) not in walked:
                    continue
                held = self.held_by_object(binding.where, nested)
                held = self.holds(held) if held is not None else None
                if held is not None and held in self.objects and held.role == "loader":
                    by_scope.setdefault(binding.where, {}).setdefault(
                        id(held), Alias(f"{binding.key}.{key[5:]}", held, binding.stmt))

    def _held_as_parts(self, by_scope: dict[Scope, dict[int, Alias]]) -> None:
        """``model = GAN()`` whose ``__init__`` builds ``self.gen`` and ``self.disc``, trained by optimizers over
        ``model.gen.parameters()`` and ``model.disc.parameters()``: the scope that builds the parent holds each part
        as ``model.gen`` right after that statement, and prepare assigns the prepared part back to the attribute,
        so the parent's methods (``self.gen(z)``) run it through its wrapper."""
        owners = {(id(where), dotted(owner)) for optimizer in self.objects if optimizer.role == "optimizer"
                  for where, owner in self.trained_by(optimizer)}
        parts = [o for o in self.objects if o.role == "model" and o.key.startswith("self.") and o.key.count(".") == 1
                 and o.where.name == "__init__" and o.where.class_scope is not None]
        if not parts:
            return
        for binding in self.facts.bindings():
            if binding.value is None or binding.loop is not None or "." in binding.key \
                    or not isinstance(binding.stmt, cst.SimpleStatementLine):
                continue
            init = self.constructed_init(strip_placement(binding.value))
            for part in parts:
                key = f"{binding.key}.{part.key[5:]}"
                if init is part.where and (id(binding.where), key) in owners and len(binding.where.bindings.get(binding.key, [])) == 1:
                    by_scope.setdefault(binding.where, {}).setdefault(id(part), Alias(key, part, binding.stmt))

    def _fold_builders(self, by_scope: dict[Scope, dict[int, Alias]]) -> None:
        """What a builder method binds on ``self`` (``self.build_model()`` in ``__init__`` making ``self.unet`` and
        ``self.optimizer``) is held by ``__init__`` right after that call: the objects meet there with the loaders
        ``__init__`` stored, and prepare can go right after the call."""
        for scope, aliases in list(by_scope.items()):
            site = self.builder_call(scope)
            if site is None:
                continue
            held = by_scope.setdefault(site.scope, {})
            for key, alias in aliases.items():
                if alias.stmt is not None and alias.key.startswith("self."):
                    held[key] = Alias(alias.key, alias.obj, site.stmt, alias.many)
        trainers: dict[int, list[tuple[Scope, Scope]]] = {}
        for scope in self.facts.scopes:
            init = self._constructed(scope)
            if init is not None and by_scope.get(init):
                trainers.setdefault(id(init), []).append((scope, init))
        for found in trainers.values():
            if len(found) != 1:
                continue  # ``train(loader)`` and ``finetune(loader)``: either may run first, or alone
            # ``def train(self, train_loader)``, called once: it holds what the constructor bound, from its top
            scope, init = found[0]
            held = by_scope.setdefault(scope, {})
            for key, alias in by_scope[init].items():
                if alias.stmt is not None and alias.key.startswith("self.") and key not in held:
                    held[key] = Alias(alias.key, alias.obj, None, alias.many)

    def _rebuilt(self, by_scope: dict[Scope, dict[int, Alias]],
                 required: list[Binding]) -> tuple[Scope, CallSite, str] | None:
        """A method that binds a required object on ``self`` and that ``__init__`` calls, but is called again elsewhere
        (``self.build_model()`` after the training, to reload the best weights into a fresh model): the builder, its
        other call, and the first name it binds. None when there is no such method."""
        ids = {id(o) for o in required}
        for scope, aliases in by_scope.items():
            keys = [a.key for i, a in aliases.items() if i in ids and a.stmt is not None and a.key.startswith("self.")]
            sites = self.call_sites(scope)
            if not keys or scope.class_scope is None or len(sites) < 2:
                continue
            other = next((s for s in sites if s.scope.name != "__init__"), None)
            if other is not None and any(s.scope.name == "__init__" and s.scope.class_scope is scope.class_scope
                                         for s in sites):
                return scope, other, keys[0]
        return None

    def _built_per_call(self, required: list[Binding]) -> Binding | None:
        """An optimizer built in a function that every caller calls in a loop (a new optimizer per epoch), training a
        model built outside that function: prepared once it cannot be. None when there is none."""
        for obj in required:
            sites = self.call_sites(obj.where) if obj.role == "optimizer" and obj.where.kind == "function" else []
            if sites and all(self.facts.looped(s) for s in sites) and any(
                    (head := (dotted(owner) or "").split(".")[0]) and where.resolve(head) not in (None, obj.where)
                    for where, owner in self.trained_by(obj)):
                return obj  # (the model a global, or built by an outer function)
        return None

    def _several_trainers(self, required: list[Binding]) -> list[Scope]:
        """The scopes that each build a whole training of their own (an optimizer and the model it trains) when every
        model and optimizer is built in one of them: ten GAN classes chosen by ``--gan_type``, each building G, D,
        their optimizers and its loader in ``__init__``. Empty when the objects are not split that way."""
        homes: dict[int, Scope] = {id(o.where): o.where for o in required if o.role == "optimizer"}

        def homes_of(obj: Binding) -> list[Scope]:
            """Where ``obj`` is built, or the homes that call its builder (``encoder = make_encoder()``, a factory
            choosing the architecture, which each training may call for a model of its own)."""
            if id(obj.where) in homes:
                return [obj.where]
            callers = {id(site.scope): site.scope for site in self.call_sites(obj.where)}
            return list(callers.values()) if callers and set(callers) <= set(homes) else []

        kept = [(o, home) for o in required if o.role in ("optimizer", "model") for home in homes_of(o) or [None]]
        if len(homes) < 2 or any(home is None for _, home in kept):
            return []  # (a loader may come from a helper every trainer calls)
        for home in homes.values():
            if not {"optimizer", "model"} <= {o.role for o, h in kept if h is home}:
                return []
        return list(homes.values())

    def _completed(self, binding: Binding) -> cst.BaseStatement:
        """The statement after which ``binding``'s object is complete: a list is, after its last ``append``."""
        if not binding.many:
            return binding.stmt
        order = self.facts.order
        mutations = [
            s.stmt for s in binding.where.calls
            if s.method in ("append", "extend", "insert") and isinstance(s.node.func, cst.Attribute)
            and dotted(s.node.func.value) == binding.key and order[s.stmt][0] > order[binding.stmt][0]
        ]
        return max(mutations, key=lambda s: order[s][0], default=binding.stmt)

    def _shallowest(self, candidates: list[Scope]) -> Scope:
        """The candidate no other candidate calls (directly or not): prepare runs once, near the entry."""
        def callers(scope: Scope, seen: set[int]) -> set[int]:
            out: set[int] = set()
            for site in self.call_sites(scope):
                caller = site.scope
                if id(caller) not in seen:
                    seen.add(id(caller))
                    out |= {id(caller)} | callers(caller, seen)
            return out

        ids = {id(c) for c in candidates}
        roots = [c for c in candidates if not (callers(c, set()) & ids)]
        return (roots or candidates)[0]

    def _place_prepare(self, scope: Scope, aliases: list[Alias]) -> None:
        stmts = [a.stmt for a in aliases if a.stmt is not None]
        # a training per pass of a loop (a k-fold): prepared in the pass, after its own objects (the others, built
        # before the loop, are in hand there)
        passed = [a.stmt for a in aliases if a.stmt is not None
                  and any(id(s) in self.pass_loops for s in self.facts.chain(a.stmt))]
        if passed:
            # what the passes share (a loader built before the loop) is prepared once, where it is built: prepared
            # again in each pass it would be sharded again
            shared = [a for a in aliases if a.stmt not in passed]
            if any(a.stmt is None or a.obj.where is not scope or a.obj.loop is not None
                   or not isinstance(a.obj.stmt, cst.SimpleStatementLine) for a in shared):
                first = next(a for a in aliases if a.stmt in passed)
                self._problem(MODEL_IN_LOOP, first.obj.stmt, name=first.key)
                return
            self.in_place.extend(a.obj for a in shared)
            aliases = [a for a in aliases if a not in shared]
            stmts = passed
        block = common_block(self.facts, scope, stmts, self.pass_loops)
        outside = common_block(self.facts, scope, stmts)
        if outside is not block and self.accelerator_block is None:
            self.accelerator_block = outside  # a training per pass of a loop: one accelerator, before the loop
        order = {role: i for i, role in enumerate(PREPARED_ROLES)}
        tops = [self.facts.top_in(s, block) for s in stmts]
        last = max((t for t in tops if t is not None), key=block.index, default=None)
        aliases.sort(key=lambda a: (order[a.obj.role or ""], self.facts.order[a.stmt][0] if a.stmt is not None else -1))
        if last is not None:
            for index, stmt in enumerate(block[: block.index(last)]):
                if self.drives_training(scope, stmt):
                    late = [a for a in aliases if a.stmt is not None
                            and block.index(self.facts.top_in(a.stmt, block) or block[0]) > index]  # type: ignore[arg-type]
                    if late and all(self._later_experiment(scope, a, stmt) for a in late):
                        # experiments one after another (a notebook's): each later one's objects are prepared
                        # right where they are built, as the first one's are before its loop
                        self.in_place.extend(a.obj for a in late)
                        self.in_place.extend(self._rebound_models(scope, late, stmt))
                        self._place_prepare(scope, [a for a in aliases if a not in late])
                        return
                    culprit = next(a for a in aliases if a.stmt is not None and self.facts.top_in(a.stmt, block) is last)
                    assert culprit.stmt is not None
                    if self._second_experiment(scope, culprit, stmt):
                        self._problem(SECOND_EXPERIMENT, culprit.stmt, name=culprit.key)
                    else:
                        self._problem(CREATED_AFTER_LOOP, culprit.stmt, name=culprit.key)
                    return
        inner_if = last if isinstance(last, (cst.If, cst.With)) else None
        inner = self._into_training_branch(scope, aliases, block, last)
        if inner is None:
            return
        block, last = inner
        last = self._after_sized_schedulers(scope, block, last)
        self.branch_sites = [(b, self._after_sized_schedulers(scope, b, at)) for b, at in self.branch_sites]
        # ``if args.use_optimizer: optimizer = ...``: after the ``if`` the name is unbound when the test is false,
        # so that object is prepared in its branch, right where it is built, and the rest where they were to be
        branched = [a for a in aliases if self._bound_only_if(scope, a, block, last)]
        if branched and self.branch_sites and inner_if is not None:
            # the other branches' prepares list the same names: one prepared where it is built here would be
            # left out of theirs
            self._problem(TRAININGS_IN_BRANCHES, inner_if, names=f"`{branched[0].key}`", test=branch_test(inner_if),
                          why="it is bound there only under a condition the training does not share")
            return
        self.in_place.extend(a.obj for a in branched)
        aliases = [a for a in aliases if a not in branched]
        aliases, self.rebinds = follow_aliases(self, scope, aliases, last)  # ``model = embedding_net`` trains
        self.prepare_scope, self.prepare_block, self.prepare_after, self.aliases = scope, block, last, aliases

    def _after_sized_schedulers(self, scope: Scope, block: list[cst.BaseStatement],
                                last: cst.BaseStatement | None) -> cst.BaseStatement | None:
        """``last``, or a later statement of ``block`` that builds a scheduler left out of prepare (stepped once per
        epoch) from the length of a loader it prepares, with no training in between (SimCLR's
        ``CosineAnnealingLR(optimizer, T_max=len(train_loader))``): built after prepare it would read the prepared
        loader's length, N times shorter, and run its schedule N times too fast, so prepare goes after it."""
        if last is None:
            return None
        loaders = [o for o in self.objects if o.role == "loader"]
        for binding in self.bindings_with_role("scheduler"):
            top = self.facts.top_in(binding.stmt, block) if binding.where is scope and binding not in self.objects else None
            if top is None or binding.value is None or binding.loop is not None or block.index(top) <= block.index(last):
                continue  # (one made again in a loop is the plan's problem: ACC027)
            sized = any(
                isinstance(c, cst.Call) and len(c.args) == 1 and self.origin(scope, c.args[0].value) in loaders
                for c in m.findall(binding.value, m.Call(func=m.Name("len")))
            )
            if sized and not any(self.drives_training(scope, s) for s in block[block.index(last) + 1:block.index(top) + 1]):
                last = top
        return last

    def _rebound_models(self, scope: Scope, late: list[Alias], loop: cst.BaseStatement) -> list[Binding]:
        """The models a later experiment's optimizers train, built again after ``loop`` (``model = Net()`` right
        before ``optimizer = Adam(model.parameters())``): the last such binding before each optimizer."""
        start = self.facts.order[loop][1]
        found: list[Binding] = []
        for alias in late:
            if alias.obj.role != "optimizer" or alias.stmt is None:
                continue
            at = self.facts.order[alias.stmt][0]
            for _, owner in self.trained_by(alias.obj):
                key = dotted(owner)
                earlier = [b for b in scope.bindings.get(key or "", []) if self._names_a_model(b)
                           and isinstance(b.stmt, cst.SimpleStatementLine) and start < self.facts.order[b.stmt][0] < at]
                if earlier and earlier[-1] not in found and earlier[-1] not in self.in_place:
                    found.append(earlier[-1])
        return found

    def _names_a_model(self, binding: Binding) -> bool:
        """A binding that makes a model, or a second name for one (``model = embedding_net``: the name the later
        experiment trains, prepared right there; the first name alone would leave that one training the bare
        module)."""
        if binding.role == "model":
            return True
        if binding.value is None or binding.unpacked is not None or dotted(strip_placement(binding.value)) is None:
            return False
        held = self.holds(binding)
        return held is not None and held.role == "model"

    def _later_experiment(self, scope: Scope, alias: Alias, loop: cst.BaseStatement) -> bool:
        """Whether ``alias`` re-binds, after training started at ``loop``, a name an earlier experiment bound to an
        object of the same kind, in a plain statement of the prepare scope (so it can be prepared where it is)."""
        plain = (isinstance(alias.stmt, cst.SimpleStatementLine) and alias.obj.where is scope and not alias.many
                 and alias.obj.loop is None)
        # a later experiment's own data (``big = DataLoader(...)``) and model under a new name (``model_1 = ...``,
        # trained by the re-bound optimizer) are prepared where they are built too
        return plain and (alias.obj.role in ("loader", "model") or self._second_experiment(scope, alias, loop))

    def _model_collection(self, scope: Scope, owner: cst.BaseExpression) -> bool:
        """Whether ``owner`` names a list, tuple or dict the program fills with models (``[Net(), Net()]``)."""
        key = dotted(owner)
        binding = self.binding_of(scope, key) if key is not None and key.count(".") <= 1 else None
        value = binding.value if binding is not None else None
        if isinstance(value, cst.ListComp):
            elements = [value.elt]
        elif isinstance(value, (cst.List, cst.Tuple)):
            elements = [e.value for e in value.elements]
        elif isinstance(value, cst.Dict):
            elements = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
        else:
            return False
        return bool(elements) and any(
            classify(e, binding.where.imports, self.facts.classes) == "model" for e in elements)  # type: ignore[union-attr]

    def _second_experiment(self, scope: Scope, culprit: Alias, loop: cst.BaseStatement) -> bool:
        """Whether ``culprit``'s name was bound to an object of the same kind before the training ``loop`` (a first
        experiment), rather than the object being simply created late."""
        role = culprit.obj.role
        order = self.facts.order[loop][0]
        for binding in scope.bindings.get(culprit.key, []):
            if binding.role == role and binding.stmt is not culprit.stmt and self.facts.order[binding.stmt][0] < order:
                return True
        return False

    def drives_training(self, scope: Scope, stmt: cst.BaseStatement) -> bool:
        """Whether ``stmt`` runs a training step (a ``backward``, directly or through a call)."""
        first, last = self.facts.order[stmt]
        return any(
            first <= self.facts.order[site.stmt][0] <= last and self.reaches_backward(site) and not self.demo_backward(site)
            for site in self.facts.calls
            if site.scope is scope  # a function defined here runs only when it is called
        )

    def demo_backward(self, site: CallSite) -> bool:
        """``y.backward()`` once, outside any loop, with no optimizer stepped in its scope: an autograd demo (a
        notebook's ``x.grad`` before the model), not a training step."""
        if site.method != "backward" or self.facts.looped(site):
            return False
        parent = self.facts.parent_stmt.get(site.stmt)
        for other in site.scope.calls:
            if other.method != "step" or not isinstance(other.node.func, cst.Attribute):
                continue
            chain = self.facts.chain(other.stmt)
            # a step in the backward's own straight-line code (not in a loop that trains on its own)
            if not any(isinstance(s, (cst.For, cst.While)) for s in chain) and (
                    parent is None or parent in chain):
                found = self.origin(other.scope, other.node.func.value)
                if found is None or found.role in ("optimizer", None):
                    return False  # a step of an optimizer, or of something that may be one
        return True


def _scope_name(scope: Scope) -> str:
    """``GAN.__init__`` for a method, ``train`` for a function."""
    owner = scope.class_scope
    return f"{owner.name}.{scope.name}" if owner is not None else scope.name


def _itself(binding: Binding, name: str) -> bool:
    """``model = model.train()``, ``model = model.to(device)``: the name bound again to the object it holds."""
    return binding.unpacked is None and binding.value is not None and dotted(same_module(binding.value)) == name
