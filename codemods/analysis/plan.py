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
   (``prepare_site.py`` makes decisions 3 and 4; ``data_checks.py`` checks the result; ``data_passes.py`` says
   which loops over data decide nothing: bystanders, statistics passes, generators feeding the training);
5. prepared uses (``prepared_uses.py``, the queries rules make of the result): a use sees a prepared object
   when it runs after ``prepare`` in the prepare scope, or receives it from there (parameters, ``self.x``,
   module globals).

Whatever cannot be followed is recorded in ``problems`` (``rules/refusals.py`` refuses the file with them, or
warns). What a rule needs beyond these decisions is an analysis it asks for, ``plan.analysis(find_amp)``: built on
first use from the plan, and shared, so every rule gets the same answer whoever asks first.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.data_checks import TrainingDataChecks
from accelify.codemods.analysis.data_passes import DataPasses
from accelify.codemods.analysis.distributed import find_distributed
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Scope
from accelify.codemods.analysis.flow import loader_mapping
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.penalties import penalty_backward
from accelify.codemods.analysis.prepare_site import PREPARED_ROLES, PrepareSite
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.problems import (  # the kinds rules/refusals.py reads as ``plan.KIND``
    BUILT_ELSEWHERE,
    CREATED_AFTER_LOOP,
    MODEL_IN_LOOP,
    MODELS_IN_A_COLLECTION,
    NOT_A_LOADER,
    PENALTY_ALONE,
    REBUILT_BY_A_METHOD,
    SCHEDULER_IN_LOOP,
    SECOND_EXPERIMENT,
    SELF_TRAINING_MODULE,
    SEVERAL_TRAINERS,
    UNKNOWN_DATA,
    UNSHARDED,
    Problem,
)
from accelify.codemods.analysis.roles import (
    LIBRARY_OPTIMIZERS,
    classify,
    element_call,
    factory_role,
    names_a_device,
    parameter_owners,
    parameter_owners_in,
    strip_placement,
)
from accelify.codemods.analysis.schedules import per_batch
from accelify.codemods.analysis.trainer_choice import View
from accelify.codemods.analysis.snippets import code_of

__all__ = [
    "BUILT_ELSEWHERE", "CREATED_AFTER_LOOP", "MODEL_IN_LOOP", "MODELS_IN_A_COLLECTION", "NOT_A_LOADER", "PENALTY_ALONE", "PREPARED_ROLES",
    "REBUILT_BY_A_METHOD", "SCHEDULER_IN_LOOP", "SECOND_EXPERIMENT", "SELF_TRAINING_MODULE", "SEVERAL_TRAINERS", "UNKNOWN_DATA", "UNSHARDED",
    "Alias", "Plan", "Problem",
]

T = TypeVar("T")


class Plan(PrepareSite, TrainingDataChecks, DataPasses):
    """The roles of names, the prepare site and the home of the accelerator, derived once from ``Facts``
    (the questions rules ask about the result are ``PreparedUses``'s)."""

    def __init__(self, facts: Facts, view: View | None = None) -> None:
        # ``view``: one of several trainers chosen by a flag, converted on its own (``trainer_choice.py``); the
        # others' territories are bystanders to it
        self.view = view
        self.trainers: list[Scope] = []  # the scopes of the trainers the plan found each building a training (ACC039)
        super().__init__(facts, frozenset(id(t.territory) for t in view.others) if view is not None else frozenset())
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
        if self.prepare_scope is not None and (penalty := penalty_backward(self, self.bystander)) is not None:
            key = dotted(penalty.node.func.value) or "the penalty"  # type: ignore[attr-defined]
            self._problem(PENALTY_ALONE, penalty.node, name=key)
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
            owners = self._group_owners(where, [a.value for c in calls if isinstance(c, cst.Call) for a in c.args])
        if owners:
            receiver = _method_receiver(optimizer)
            return [
                (optimizer.where, receiver)  # ``self.fc.parameters()`` too: the whole model is what gets prepared
                if receiver is not None and _rooted_at_self(owner)
                else (where, self._model_root(where, self._comprehended(optimizer, owner)))
                for owner in owners
            ]
        return [(optimizer.where, arg) for arg in self._model_arguments(optimizer)]

    def _group_owners(self, where: Scope, values: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
        """The owners of the ``.parameters()`` that parameter groups passed by name hold, followed through the names
        they are built from in ``where`` (``param_optimizer = list(model.named_parameters())``, then
        ``groups = [{"params": [p for n, p in param_optimizer if ...]}, ...]``), a few bindings deep."""
        names = [v.value for v in values if isinstance(v, cst.Name)]
        seen: set[str] = set()
        owners: list[cst.BaseExpression] = []
        for _ in range(3):
            nxt: list[str] = []
            for name in names:
                binding = self.binding_of(where, name)
                if name in seen or binding is None or binding.value is None or binding.where is not where:
                    continue
                seen.add(name)
                found = parameter_owners_in(binding.value)
                owners += found
                if not found:
                    nxt += [n.value for n in m.findall(binding.value, m.Name()) if isinstance(n, cst.Name)]
            if owners or not nxt:
                break
            names = nxt
        return owners

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
        if returned and not all(isinstance(e, cst.Call) for e in returned):
            # ``data_loader = DataLoader(...); return data_loader``: each call makes a loader of its own (stargan's
            # ``get_loader`` called for CelebA and for RaFD), as a returned call would; models and optimizers stay
            # the helper's own objects, which the optimizer's ``.parameters()`` there names
            bound = [_bound_call(function, e) for e in returned]
            if all(isinstance(e, cst.Call) and classify(e, function.imports, self.facts.classes) == "loader" for e in bound):
                returned = bound
        if not returned or len(returned) != len(function.returns) or not all(isinstance(e, cst.Call) for e in returned):
            return
        roles = {classify(e, function.imports, self.facts.classes) for e in returned}
        if "device" in roles and all(names_a_device(e, function.imports) for e in returned):
            roles = {"device"}  # ``return torch.device('cuda:0')`` or, without CUDA, ``return torch.device('cpu')``
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
        trained_on = {id(found) for loop, found in walked
                      if any(self.reaches_backward(site) for site in loop.calls) or self._feeds_training(loop)}
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

def _bound_call(function: Scope, expr: cst.BaseExpression) -> cst.BaseExpression:
    """``data_loader`` of ``return data_loader`` -> the call it is bound to, when the function binds it once
    (``data_loader = DataLoader(...)``): each call of the helper makes an object of its own, as a returned call does."""
    bindings = function.bindings.get(expr.value, []) if isinstance(expr, cst.Name) else []
    if len(bindings) == 1 and bindings[0].loop is None and bindings[0].value is not None:
        value = strip_placement(bindings[0].value)
        if isinstance(value, cst.Call):
            return value
    return expr


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
    """Whether ``binding`` holds a ``torch.optim`` optimizer, or a library's (``transformers.AdamW``), not just a
    call that takes parameters."""
    where, core = _maker(binding)
    q = where.imports.qualname(core.func) or ""
    return q.startswith("torch.optim.") or q in LIBRARY_OPTIMIZERS or \
        factory_role(core, where.imports, {}) == "optimizer"  # ``config.init_obj('optimizer', torch.optim, params)``
