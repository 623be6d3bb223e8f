"""What to prepare and where: roles, the objects training needs prepared, the one place ``prepare``
goes, the place the ``Accelerator`` is created, and which uses see the prepared objects.

Rules read the plan; none of them walks the tree again. The decisions, in order:

1. roles: every binding that creates a model, optimizer, scheduler, data loader or device;
2. objects: the optimizers, the models they train, their schedulers stepped per batch (``schedules.per_batch``:
   one stepped once per epoch stays out) and every iterated data loader (``Flow.origin`` follows them through
   calls, returns, attributes and local modules);
3. the prepare site: the scope closest to the entry point that holds all of them as names (a
   parameter, a local, ``self.x``), in the innermost block that binds them all, right after the last;
4. the home: where ``accelerator = Accelerator(...)`` goes: the prepare scope, or the caller that
   built some of the objects and passed them in (``main`` calling ``train_model(model, device)``);
5. prepared uses (``prepared_uses.py``, the queries rules make of the result): a use sees a prepared object
   when it runs after ``prepare`` in the prepare scope, or receives it from there (parameters, ``self.x``,
   module globals).

Whatever cannot be followed is recorded in ``problems`` (``rules/refusals.py`` refuses the file with them, or
warns). What a rule needs beyond these decisions is an analysis it asks for, ``plan.analysis(find_amp)``: built on
first use from the plan, and shared, so every rule gets the same answer whoever asks first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import libcst as cst

from accelify.codemods.analysis.blocks import block_of
from accelify.codemods.analysis.collect import target_names
from accelify.codemods.analysis.distributed import find_distributed
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Scope
from accelify.codemods.analysis.flow import loader_mapping
from accelify.codemods.analysis.prepared_uses import Alias, PreparedUses
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.schedules import per_batch
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.roles import (
    classify,
    element_call,
    factory_role,
    names_a_device,
    parameter_owners,
    parameter_owners_in,
    removed_wrap,
    strip_placement,
)

PREPARED_ROLES = ("model", "optimizer", "loader", "scheduler")
T = TypeVar("T")
_BUILTIN_DATA = {"range", "list", "zip", "enumerate", "iter", "tuple", "sorted", "reversed", "map", "filter", "itertools.count",
                 "tqdm.trange", "tqdm.auto.trange"}
_BLOCKS = (cst.If, cst.With, cst.Try, cst.Else, cst.Finally, cst.ExceptHandler)


# What the plan can find it cannot settle (``Problem.kind``); ``rules/refusals.py`` gives each its warning code.
MODEL_IN_LOOP = "model_in_loop"  # a model or optimizer built inside a loop: refused
SCHEDULER_IN_LOOP = "scheduler_in_loop"  # a scheduler built inside a loop: left out of prepare
CREATED_AFTER_LOOP = "created_after_loop"  # an object created after training starts: refused
BUILT_ELSEWHERE = "built_elsewhere"  # no scope holds every object: refused
SEVERAL_TRAINERS = "several_trainers"  # several scopes each build a whole training of their own: refused
UNSHARDED = "unsharded"  # training walks a loader as it was before prepare: refused
UNKNOWN_DATA = "unknown_data"  # training walks data that cannot be followed
NOT_A_LOADER = "not_a_loader"  # training walks a library's batch iterator that prepare cannot shard: refused
SELF_TRAINING_MODULE = "self_training_module"  # a module that builds and steps its own optimizer: refused
MODELS_IN_A_COLLECTION = "models_in_a_collection"  # an optimizer trains models kept in a list: refused
SECOND_EXPERIMENT = "second_experiment"  # a name re-bound to a new object after training: a second experiment


@dataclass(frozen=True)
class Problem:
    """Something the plan could not settle: what kind, the node to point at, the message fields, and
    whether it stops the conversion (``refuse``) or only warns."""

    kind: str
    node: cst.CSTNode
    fields: tuple[tuple[str, str], ...]
    refuse: bool = True


class Plan(PreparedUses):
    """The roles of names, the prepare site and the home of the accelerator, derived once from ``Facts``
    (the questions rules ask about the result are ``PreparedUses``'s)."""

    def __init__(self, facts: Facts) -> None:
        super().__init__(facts)
        self.imports = facts.imports
        self.problems: list[Problem] = []
        self.in_place: list[Binding] = []  # loaders built inside a loop: each prepared right after it is built
        self.distributed = find_distributed(facts, self)  # hand-written distributed code (rank tests, device indexes)
        self._bystanders: set[int] | None = None
        self._assign_roles()
        self.objects: list[Binding] = self._find_objects()
        self.prepare_scope: Scope | None = None
        self.prepare_block: list[cst.BaseStatement] = []
        self.prepare_after: cst.BaseStatement | None = None  # prepare goes right after this statement
        self.aliases: list[Alias] = []  # what prepare passes and rebinds, in order
        self.home: Scope | None = None
        self.home_block: list[cst.BaseStatement] = []
        self.home_call: CallSite | None = None  # the call in the home that leads to the prepare scope
        self._prepared_memo: dict[tuple[int, str, int], bool] = {}
        self._analyses: dict[Callable[..., Any], Any] = {}
        if self.objects and not any(p.refuse for p in self.problems):
            self._choose_prepare_site()
        if self.prepare_scope is not None:
            self._choose_home()
            self._check_training_data()
            self._check_trained_models()

    def analysis(self, build: Callable[["Plan"], T]) -> T:
        """The analysis ``build`` makes of this plan (``find_amp``, ``find_accumulation``, ``Creation``), built on
        first use and then shared: every rule that asks gets the same answer, whoever asks first."""
        if build not in self._analyses:
            self._analyses[build] = build(self)
        return self._analyses[build]  # type: ignore[no-any-return]

    @property
    def builder(self) -> Scope | None:
        """The scope the objects are prepared in (kept for the rules that think in those terms)."""
        return self.prepare_scope

    # roles --------------------------------------------------------------------------------------
    def _assign_roles(self) -> None:
        for binding in self.facts.bindings():
            binding.role = classify(binding.value, binding.where.imports, self.facts.classes)
            binding.many = binding.role is not None and element_call(binding.value) is not None
            if binding.role == "device" and self.distributed.follows_device(binding.value):
                binding.role = None  # ``device_type = 'cuda' if 'cuda' in device else 'cpu'``: it follows the device
        for scope in self.facts.scopes:  # every assignment of a device variable is one (the else branches too)
            for bindings in scope.bindings.values():
                if any(b.role == "device" for b in bindings):
                    for b in bindings:
                        if b.role is None and b.value is not None and names_a_device(b.value, b.where.imports):
                            b.role = "device"
        for binding in self.facts.bindings():
            if binding.role is None and (binding.value is not None or binding.unpacked is not None):
                self._made_by_helper(binding)
        stepped: set[str | None] = set()
        zeroed: set[str | None] = set()
        for site in self.facts.calls:
            if site.method in ("step", "zero_grad") and isinstance(site.node.func, cst.Attribute):
                (stepped if site.method == "step" else zeroed).add(dotted(site.node.func.value))
        for binding in self.facts.bindings():
            if binding.role == "optimizer" and binding.key not in stepped | zeroed and not _from_torch_optim(binding):
                binding.role = None  # ``OrderedSet(m.named_parameters())`` is no optimizer unless it steps
            elif binding.role is None and binding.key in stepped & zeroed and self._model_arguments(binding):
                # ``optimizer = make_optimizer(model, **cfg)`` (however it builds it): stepped and zeroed, fed a model
                binding.role = "optimizer"
        for binding in self.facts.bindings():  # whatever an optimizer trains is a model
            if binding.role == "optimizer":
                for where, owner in self.trained_by(binding):
                    found = self.origin(where, owner)
                    if found is not None and found.role is None and found.value is not None:
                        found.role = "model"
        self._origins.clear()
        self._params.clear()

    def trained_by(self, optimizer: Binding) -> list[tuple[Scope, cst.BaseExpression]]:
        """The models ``optimizer`` trains, as (scope, expression): the owners of the ``.parameters()``
        passed to its constructor (for a list, to each element and to what is appended to it), else the
        model arguments of the helper that made it. ``block`` of ``for block in model.blocks`` stands for
        ``model.blocks``; ``model.stem`` for ``model`` when only the whole model can be followed."""
        where, call = _maker(optimizer)
        calls: list[cst.BaseExpression] = [call]
        if optimizer.many:
            calls = [e.value for e in optimizer.value.elements] if isinstance(optimizer.value, (cst.List, cst.Tuple)) else [call]  # type: ignore[union-attr]
            calls += [s.node.args[0].value for s in optimizer.where.calls if s.method in ("append", "extend")
                      and s.node.args and dotted(s.node.func.value) == optimizer.key]  # type: ignore[attr-defined]
        owners = [o for c in calls if isinstance(c, cst.Call) for o in parameter_owners(c)]
        if not owners:  # ``AdamW(optimizer_grouped_parameters, ...)``: the groups name ``model.named_parameters()``
            groups = [self.binding_of(where, a.value.value) for c in calls if isinstance(c, cst.Call)
                      for a in c.args if isinstance(a.value, cst.Name)]
            owners = [o for b in groups if b is not None and b.value is not None and b.where is where
                      for o in parameter_owners_in(b.value)]
        if owners:
            receiver = _method_receiver(optimizer)
            return [
                (optimizer.where, receiver)  # ``self.fc.parameters()`` too: the whole model is what gets prepared
                if receiver is not None and _rooted_at_self(owner)
                else (where, self._model_root(where, self._comprehended(optimizer, owner)))
                for owner in owners
            ]
        return [(optimizer.where, arg) for arg in self._model_arguments(optimizer)]

    def _comprehended(self, optimizer: Binding, owner: cst.BaseExpression) -> cst.BaseExpression:
        """``block`` -> ``model.blocks`` when ``block`` is the target of the list comprehension's ``for``."""
        value = optimizer.value
        if isinstance(value, cst.ListComp) and isinstance(owner, cst.Name):
            comp: cst.BaseComp | None = value.for_in  # type: ignore[assignment]
            while comp is not None:
                if owner.value in target_names(comp.target):  # type: ignore[attr-defined]
                    iterable = comp.iter  # type: ignore[attr-defined]
                    while isinstance(iterable, cst.Call) and iterable.args:  # enumerate(model.blocks)
                        iterable = iterable.args[0].value
                    return iterable
                comp = comp.inner_for_in  # type: ignore[attr-defined]
        return owner

    def _model_root(self, scope: Scope, owner: cst.BaseExpression) -> cst.BaseExpression:
        """``model.stem`` -> ``model`` when ``model.stem`` itself cannot be followed but ``model`` can."""
        while isinstance(owner, cst.Attribute) and self.origin(scope, owner) is None and dotted(owner.value) is not None:
            owner = owner.value
        return owner

    def _model_arguments(self, binding: Binding) -> list[cst.BaseExpression]:
        """Arguments of ``binding``'s call that hold an ``nn.Module`` built here (``make_optimizer(model)``)."""
        value = strip_placement(binding.value) if binding.value is not None else None
        if not isinstance(value, cst.Call):
            return []
        out = []
        if isinstance(value.func, cst.Attribute) and (found := self.origin(binding.where, value.func.value)) is not None:
            if found.role == "model":  # ``optimizer = model.configure_optimizers(...)``
                out.append(value.func.value)
        for arg in value.args:
            found = self.origin(binding.where, arg.value) if not arg.star else None
            if found is not None and found.role == "model":
                out.append(arg.value)
        return out

    def _made_by_helper(self, binding: Binding) -> None:
        """``opt = make_optimizer(model, **cfg)`` where the helper returns ``torch.optim.AdamW(...)``
        directly, or ``train_dl, test_dl = make_loaders()`` returning ``DataLoader(...), DataLoader(...)``:
        the binding takes the role of what every ``return`` builds (element ``index`` of a tuple)."""
        index = None
        if binding.unpacked is not None:
            value, index = binding.unpacked
        else:
            value = strip_placement(binding.value)  # type: ignore[arg-type]
        if not isinstance(value, cst.Call) or not self._local_call(value):
            return
        function = self.callee(self.facts.sites[value])
        assert function is not None
        returned = []
        for ret in function.returns:
            expr = ret.value
            if index is not None:
                expr = expr.elements[index].value if isinstance(expr, (cst.Tuple, cst.List)) and index < len(expr.elements) else None
            if expr is not None:
                returned.append(strip_placement(expr))
        if not returned or len(returned) != len(function.returns) or not all(isinstance(e, cst.Call) for e in returned):
            return
        roles = {classify(e, function.imports, self.facts.classes) for e in returned}
        if len(roles) == 1 and None not in roles:
            binding.role = roles.pop()
            binding.made = (function, returned[0])

    def bindings_with_role(self, role: str) -> list[Binding]:
        return [b for b in self.facts.bindings() if b.role == role]

    # the objects to prepare ---------------------------------------------------------------------
    def _find_objects(self) -> list[Binding]:
        optimizers = [o for o in self.bindings_with_role("optimizer") if not self.bystander(o.where)]
        objects: list[Binding] = []
        for optimizer in optimizers:
            if optimizer.loop is not None:
                self._problem(MODEL_IN_LOOP, optimizer.stmt, name=optimizer.key)
            objects.append(optimizer)
            for where, owner in self.trained_by(optimizer):
                model = self.origin(where, owner)
                if model is None and self._model_collection(where, owner):
                    # ``nets = [Net(), Net(bn=True)]`` and an optimizer per net: prepare cannot take the list's models
                    # where they are used, and unprepared they would train as N independent copies
                    self._problem(MODELS_IN_A_COLLECTION, optimizer.stmt, name=dotted(owner) or "the models")
                if model is not None and model.role == "model" and model not in objects:
                    if model.loop is not None:
                        self._problem(MODEL_IN_LOOP, model.stmt, name=model.key)
                    objects.append(model)
        if not optimizers:
            # no optimizer: parameters updated by hand (`for p in model.parameters(): p.data.add_(p.grad, ...)`)
            for model in self._updated_by_hand():
                if model not in objects and not self.bystander(model.where):
                    objects.append(model)
            if not objects:
                return []
        for scheduler in self.bindings_with_role("scheduler"):
            core = strip_placement(scheduler.value)  # type: ignore[arg-type]
            first = core.args[0].value if isinstance(core, cst.Call) and core.args else None
            if first is not None and self.origin(scheduler.where, first) in objects and per_batch(self, scheduler) is not False:
                objects.append(scheduler)  # one stepped once per epoch stays out: prepared, it would move N epochs per epoch
        walked = [(loop, found) for loop in self.facts.loops for source in self.walked_sources(loop)
                  if (found := self.origin(loop.scope, source))]
        iterated = {id(found) for loop, found in walked if not self.distributed.main_only(self.facts, loop.node, loop.scope)}
        by_main = {id(found) for loop, found in walked if self.distributed.main_only(self.facts, loop.node, loop.scope)}
        trained_on = {id(found) for loop, found in walked if any(self.reaches_backward(site) for site in loop.calls)}
        self._optional: set[int] = set()
        for loader in self.bindings_with_role("loader"):
            if self.bystander(loader.where):
                continue
            if id(loader) in by_main - iterated:
                continue  # walked only by code the main process runs alone: all of it, unprepared
            if self._data_pass(loader):
                continue  # a function's own pass over data (statistics), whether the training calls it or not
            objects.append(loader)
            if id(loader) not in iterated or id(loader) not in trained_on:
                # prepared where the others are, if it is in hand there; out of reach, a loader no one iterates, or
                # one only evaluation walks (``eval_split`` in a training callback), is left as it is: every process
                # then evaluates all of it, and it does not decide whether the training converts
                self._optional.add(id(loader))
        kept = []
        for obj in objects:
            if obj.role == "loader" and (obj.loop is not None or loader_mapping(obj)):
                # a loader rebuilt every epoch, or loaders kept in a dict: prepared right where they are built
                self.in_place.append(obj)
                kept.append(obj)
            elif obj.loop is not None and obj.role == "scheduler":
                self._problem(SCHEDULER_IN_LOOP, obj.stmt, refuse=False, name=obj.key)
            else:
                kept.append(obj)
        return kept

    def bystander(self, scope: Scope) -> bool:
        """Whether ``scope`` is a module-level function nothing in the program refers to (no call, no name read,
        no attribute of that name) while the script's own top level trains: the training never runs it (a
        ``sanity_check()`` kept for debugging by hand), so it does not decide what is prepared or refused."""
        if self._bystanders is None:
            self._bystanders = self._find_bystanders()
        return id(_outermost(scope)) in self._bystanders  # a function nested in a bystander is one too

    def _find_bystanders(self) -> set[int]:
        entry = self.facts.module_scope
        if not any(self.reaches_backward(site) for site in entry.calls):
            return set()  # no training entry in the script itself (a library, a main() called from elsewhere)
        read = {name for scope in self.facts.scopes for name in scope.refs}
        read |= {attribute.attr.value for scope in self.facts.scopes for attribute, _ in scope.attributes}
        found = {
            id(scope) for scope in self.facts.scopes
            if scope.kind == "function" and scope.parent is not None and scope.parent.kind == "module"
            and scope.name not in read and not self.call_sites(scope)
        }
        outside = [o for o in self.bindings_with_role("optimizer") if id(_outermost(o.where)) not in found]
        return found if outside else set()  # what trains is all in them: the script's entry is elsewhere

    def _data_pass(self, loader: Binding) -> bool:
        """A loader a function builds, walks and keeps to itself, without training or touching a model or an
        optimizer (``compute_mean_std(dataset)`` in a helper module, called before training or never): a pass
        over data, not training data. Unprepared, every process walks all of it, as the original did, so each
        computes the same statistics; and a function the training never calls does not decide whether the
        training converts."""
        where = loader.where
        if where.kind != "function" or where.class_scope is not None or loader.loop is not None or "." in loader.key:
            return False
        if any(self.reaches_backward(site) for site in where.calls):
            return False
        if any(b.role in ("model", "optimizer", "scheduler") for found in where.bindings.values() for b in found):
            return False  # the function builds what trains: its loader is the training's
        loops = [lp for lp in self.facts.loops if lp.scope is where and dotted(self.loop_source(lp)) == loader.key]
        if not loops:
            return False
        walked = {id(lp.node) for lp in loops}
        for ref in where.refs.get(loader.key, []):
            holder = where.holders.get(id(ref))
            if holder is None or (id(holder) not in walked and f"len({loader.key})" not in code_of(holder)):
                return False  # returned, stored or passed on: someone else may train on it
        for loop in loops:
            for site in loop.calls:
                found = self.origin(loop.scope, site.node.func) if isinstance(site.node.func, cst.Name) else None
                if found is not None and found.role in ("model", "optimizer"):
                    return False
        return True

    def _updated_by_hand(self) -> list[Binding]:
        """Models whose parameters a loop updates from their gradients (SGD written by hand)."""
        found: list[Binding] = []
        for loop in self.facts.loops:
            source = loop.node.iter
            if not (isinstance(source, cst.Call) and isinstance(source.func, cst.Attribute) and source.func.attr.value == "parameters"):
                continue
            if len(loop.targets) != 1 or not any(
                site.method in ("add_", "sub_", "copy_", "mul_") and loop.targets[0] in code_of(site.node.func)
                for site in loop.calls
            ) and not any(isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.AugAssign) for s in loop.stmts):
                continue
            model = self.origin(loop.scope, source.func.value)
            if model is not None and model.value is not None:
                model.role = model.role or "model"
                if model.role == "model" and model not in found:
                    found.append(model)
        return found

    def is_prepared(self, binding: Binding | None) -> bool:
        """Whether ``binding`` creates an object that ``prepare`` receives."""
        return binding is not None and binding in self.objects

    def _problem(self, kind: str, node: cst.CSTNode, *, refuse: bool = True, **fields: str) -> None:
        self.problems.append(Problem(kind, node, tuple(fields.items()), refuse))

    # the prepare site ---------------------------------------------------------------------------
    def _choose_prepare_site(self) -> None:
        by_scope: dict[Scope, dict[int, Alias]] = {}
        for binding in self.facts.bindings():
            if binding.role == "device" or binding.loop is not None or removed_wrap(binding, binding.where.imports):
                continue
            held = self.holds(binding)
            if held is not None and held in self.objects:
                aliases = by_scope.setdefault(binding.where, {})
                previous = aliases.get(id(held))
                # the first name that holds it (``model``, not a later ``model_without_ddp = model``), bound last
                later = previous is not None and previous.stmt is not None and self.facts.order[previous.stmt] < self.facts.order[binding.stmt]
                if later and self.drives_training(binding.where, binding.stmt):
                    continue  # ``model = train_model(model, ...)``: what the training returns, not a place to prepare
                if previous is None or previous.stmt is None or (later and previous.key == binding.key):
                    aliases[id(held)] = Alias(binding.key, held, self._completed(binding), binding.many)
        for scope in self.facts.scopes:
            if scope.kind != "function":
                continue
            for name in scope.param_names:
                if name in scope.bindings and not all(removed_wrap(b, scope.imports) for b in scope.bindings[name]):
                    continue  # (``model = DDP(model)`` in ``train(model)`` still holds the parameter's model)
                held = self.param_origin(scope, name)
                if held is not None and held in self.objects:
                    by_scope.setdefault(scope, {}).setdefault(id(held), Alias(name, held, None))
        required = [o for o in self.objects if id(o) not in self._optional and o not in self.in_place]
        candidates = [s for s, aliases in by_scope.items() if all(id(o) in aliases for o in required)]
        if not candidates:
            first = required[0]
            missing = [o for o in required if all(id(o) not in a for a in by_scope.values() if id(first) in a)]
            culprit = (missing or required)[0]
            trainers = self._several_trainers(required)
            if trainers:
                names = ", ".join(f"`{_scope_name(t)}`" for t in trainers)
                self._problem(SEVERAL_TRAINERS, culprit.stmt, names=names)
            else:
                self._problem(BUILT_ELSEWHERE, culprit.stmt, name=culprit.key)
            return
        scope = self._shallowest(candidates)
        aliases = list(by_scope[scope].values())
        aliases = [a for a in aliases if a.obj not in self.in_place]
        held = {id(a.obj) for a in aliases} | {id(o) for o in self.in_place}
        self.objects = [o for o in self.objects if id(o) in held]  # loaders no one iterates, out of reach: left alone
        self._place_prepare(scope, aliases)

    def _several_trainers(self, required: list[Binding]) -> list[Scope]:
        """The scopes that each build a whole training of their own (an optimizer and the model it trains) when every
        model and optimizer is built in one of them: ten GAN classes chosen by ``--gan_type``, each building G, D,
        their optimizers and its loader in ``__init__``. Empty when the objects are not split that way."""
        homes: dict[int, Scope] = {id(o.where): o.where for o in required if o.role == "optimizer"}
        if len(homes) < 2 or any(id(o.where) not in homes for o in required if o.role in ("optimizer", "model")):
            return []  # (a loader may come from a helper every trainer calls)
        for home in homes.values():
            if not {"optimizer", "model"} <= {o.role for o in required if o.where is home}:
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
        block = _common_block(self.facts, scope, stmts)
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
        self.prepare_scope, self.prepare_block, self.prepare_after, self.aliases = scope, block, last, aliases

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
                earlier = [b for b in scope.bindings.get(key or "", []) if b.role == "model"
                           and isinstance(b.stmt, cst.SimpleStatementLine) and start < self.facts.order[b.stmt][0] < at]
                if earlier and earlier[-1] not in found and earlier[-1] not in self.in_place:
                    found.append(earlier[-1])
        return found

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

    # never a silent partial conversion ------------------------------------------------------------
    def _check_training_data(self) -> None:
        """Every loop that trains walks a prepared loader as prepared, or data that is not a loader. A
        loader it walks raw (built elsewhere, or used where prepare's result does not reach) would feed
        every process the whole data set: the file is refused, naming it. Data that cannot be followed at
        all is reported."""
        for loop in self.facts.loops:
            if not any(self.reaches_backward(site) for site in loop.calls) or self.bystander(loop.scope):
                continue
            source = self.loop_source(loop)
            found = self.origin(loop.scope, source)
            # ``x, y = next(data_iter)`` with ``data_iter = iter(loader)`` walks the loader all the same; a name
            # bound to one of two loaders (``data_loader = self.a`` or ``self.b``) walks either (the loop's own
            # iterable when it is one name: checked below)
            own = self.alternatives(loop.scope, source)
            walked = [(loop.node.iter, loop.node, own)] if len(own) > 1 else []
            walked += [(site.node, site.stmt, self.alternatives(loop.scope, drawn)) for site, drawn in self.drawn_sources(loop)]
            for node, at, choices in walked:
                for value in choices:
                    origin = self.origin(loop.scope, value)
                    if origin is not None and origin.role == "loader" and self.prepared(loop.scope, value, at) is None:
                        self._problem(UNSHARDED, node, name=dotted(value) or "the loader", line=origin.key)
                        break
            if found is not None and found.role == "loader":
                if self.loader_of(loop) is None:
                    self._problem(UNSHARDED, loop.node.iter, name=dotted(source) or "the loader", line=found.key)
            elif dotted(source) is not None and (kind := self._iterator_class(found)) is not None:
                # torchtext's legacy ``BucketIterator``: followed to where it is built, and no DataLoader
                self._problem(NOT_A_LOADER, loop.node.iter, name=dotted(source) or "", iterator=kind)
            elif found is None and (inline := self._inline(loop.scope, source, "loader")) is not None:
                # ``Solver(DataLoader(...))``: built where it is passed, out of prepare's reach, as a named one would be
                self._problem(BUILT_ELSEWHERE, inline, name=dotted(source) or "the loader")
            elif dotted(source) is not None and self._unknown_data(loop.scope, source, found):
                self._problem(UNKNOWN_DATA, loop.node.iter, refuse=False, name=dotted(source) or "")

    def _iterator_class(self, found: Binding | None) -> str | None:
        """``torchtext.data.BucketIterator`` when ``found`` builds one of torchtext's batch iterators, alone or one per
        split with ``.splits(...)`` (not a DataLoader, so ``prepare`` cannot shard it: every process would walk all
        of it)."""
        if found is None or (found.value is None and found.unpacked is None):
            return None
        value = found.unpacked[0] if found.unpacked is not None else strip_placement(found.value)  # type: ignore[arg-type]
        if not isinstance(value, cst.Call):
            return None
        qualname = found.where.imports.qualname(value.func) or ""
        qualname = qualname.removesuffix(".splits")  # ``BucketIterator.splits((train, val), ...)``: one per split
        return qualname if qualname.startswith("torchtext.") and qualname.endswith("Iterator") else None

    def _check_trained_models(self) -> None:
        """A model an optimizer trains that a caller builds inline where it passes it (``Trainer(Net(), loader)``) is
        out of prepare's reach: prepared without it, the processes would train their own copies (no gradient is
        averaged). Refused, as a named one built there would be. Without a prepared loader every process trains on
        the same data, so the copies stay equal (ACC022 says it is no faster): left as it is."""
        if not any(o.role == "loader" for o in self.objects):
            return
        for optimizer in self.objects:
            if optimizer.role != "optimizer":
                continue
            for where, owner in self.trained_by(optimizer):
                if self.origin(where, owner) is None and (inline := self._inline(where, owner, "model")) is not None:
                    self._problem(BUILT_ELSEWHERE, inline, name=dotted(owner) or "the model")
                    return

    def _inline(self, scope: Scope, source: cst.BaseExpression, role: str) -> cst.Call | None:
        """The object of ``role`` a caller builds inline where it passes ``source`` (``Solver(DataLoader(...))`` stored
        as ``self.loader``, ``Trainer(Net(), ...)`` read as the parameter ``model``), if every call passes one; None
        otherwise."""
        key = dotted(source)
        binding = self.binding_of(scope, key) if key is not None and key.count(".") <= 1 else None
        value, where = (binding.value, binding.where) if binding is not None else (source, scope)
        name = dotted(value) if value is not None else None
        if name is None or where.kind != "function" or name not in where.param_names or name in where.bindings:
            return None
        found = []
        for site in self.call_sites(where):
            arg = self.arg_for(site, where, name)
            if arg is None or not isinstance(arg.value, cst.Call) or \
                    classify(arg.value, site.scope.imports, self.facts.classes) != role:
                return None
            found.append(arg.value)
        return found[0] if found else None

    def _unknown_data(self, scope: Scope, source: cst.BaseExpression, found: Binding | None) -> bool:
        """Training data that may be a DataLoader nobody can see being built: made by a call of a library
        function (``loader = build_loader(cfg)``), or not followed at all. Tensors, ranges and lists are data
        the script makes itself."""
        if found is None:
            return self._bound(scope, dotted(source) or "")
        value = strip_placement(found.value) if found.value is not None else None
        if found.unpacked is not None:
            value = found.unpacked[0]
        if not isinstance(value, cst.Call):
            return False
        qualname = found.where.imports.qualname(value.func) or ""
        local = self.facts.sites.get(value) is not None and self.callee(self.facts.sites[value]) is not None
        return not local and not qualname.startswith(("torch.", "numpy.", "np.")) and qualname not in _BUILTIN_DATA

    def _bound(self, scope: Scope, key: str) -> bool:
        """Whether ``key`` is assigned in the program (or is a parameter something is passed to)."""
        head = key.split(".")[0]
        owner = scope.resolve(head)
        if owner is None:
            return False
        if owner.kind == "function" and head in owner.param_names and head not in owner.bindings:
            return bool(self.call_sites(owner))
        return self.binding_of(scope, key) is not None

    # the home of the accelerator ----------------------------------------------------------------
    def _choose_home(self) -> None:
        scope = self.prepare_scope
        assert scope is not None
        via: list[CallSite] = []
        if scope.class_scope is None:
            while True:
                sites = self.call_sites(scope)
                callers = {id(site.scope) for site in sites}
                if not sites or len(callers) != 1 or sites[0].scope.kind == "class":
                    break  # called from several places (or none): the accelerator is made where prepare is
                caller = sites[0].scope
                if not all(self._feeds(caller, site, scope) for site in sites):
                    break
                scope, via = caller, sites  # ``train_model(model, device)``, and its retry after an OOM
        if scope.class_scope is not None and _torch_module_class(scope.class_scope.name, self.facts.classes):
            # forward-forward style: each layer makes and steps its own optimizer in a method of its own
            self._problem(SELF_TRAINING_MODULE, scope.node, name=f"{scope.class_scope.name}.{scope.name}")
        self.home, self.home_call = scope, (via[0] if via else None)
        self.home_block = self.prepare_block if not via else _common_block(self.facts, scope, [s.stmt for s in via])

    def _feeds(self, caller: Scope, site: CallSite, callee: Scope) -> bool:
        """Whether ``caller`` builds one of the prepared objects or the device it passes to ``callee``."""
        for arg in site.node.args:
            if arg.star:
                continue
            found = self.origin(caller, arg.value)
            if found is not None and found.where is caller and (found in self.objects or found.role == "device"):
                return True
        return False


def _scope_name(scope: Scope) -> str:
    """``GAN.__init__`` for a method, ``train`` for a function."""
    owner = scope.class_scope
    return f"{owner.name}.{scope.name}" if owner is not None else scope.name


def _outermost(scope: Scope) -> Scope:
    """The module-level function (or class) ``scope`` is in, or ``scope`` itself."""
    while scope.parent is not None and scope.parent.kind != "module":
        scope = scope.parent
    return scope


def _torch_module_class(name: str, classes: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> bool:
    """Whether the class ``name`` of the program subclasses a ``torch.nn`` class (``nn.Module``, ``nn.Linear``...)."""
    return any(
        base.startswith("torch.nn.") or (base not in seen and _torch_module_class(base, classes, seen | {name}))
        for base in classes.get(name, [])
    )


def _maker(binding: Binding) -> tuple[Scope, cst.Call]:
    """The scope and the call that built ``binding``'s object (in a helper that returned it, or here; the
    first element of a list)."""
    where, value = binding.made or (binding.where, strip_placement(binding.value))  # type: ignore[arg-type]
    element = element_call(value) if binding.many else None
    value = strip_placement(element) if element is not None else value
    return where, value if isinstance(value, cst.Call) else cst.Call(cst.Name("_"))


def _method_receiver(binding: Binding) -> cst.BaseExpression | None:
    """``model`` of ``optimizer = model.configure_optimizers(...)`` when a method of a class built the object:
    what that method's ``self`` stands for where the binding is."""
    if binding.made is None or binding.made[0].parent is None or binding.made[0].parent.kind != "class":
        return None
    value = binding.unpacked[0] if binding.unpacked is not None else strip_placement(binding.value)  # type: ignore[arg-type]
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        return value.func.value
    return None


def _rooted_at_self(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name) and expr.value == "self"


def _from_torch_optim(binding: Binding) -> bool:
    """Whether ``binding`` holds a ``torch.optim`` optimizer (not just a call that takes parameters)."""
    where, core = _maker(binding)
    return (where.imports.qualname(core.func) or "").startswith("torch.optim.") or \
        factory_role(core, where.imports, {}) == "optimizer"  # ``config.init_obj('optimizer', torch.optim, params)``


def _common_block(facts: Facts, scope: Scope, stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The innermost block of ``scope`` (its body, or the body of an ``if``/``with``/``try`` in it, never
    a loop's) that contains every statement of ``stmts``; ``scope.body`` when there are none."""
    block = scope.body
    if not stmts:
        return block
    while True:
        tops = {id(facts.top_in(s, block)) for s in stmts}
        if len(tops) != 1 or None in tops:
            return block
        top = facts.top_in(stmts[0], block)
        inner = block_of(top) if isinstance(top, (cst.If, cst.With, cst.Try)) else None  # type: ignore[arg-type]
        if inner is None or any(facts.top_in(s, inner) is None for s in stmts):
            return block
        block = inner
