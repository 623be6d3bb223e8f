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
   (``role_assignment.py`` makes decision 1; ``prepare_site.py`` decision 3 (``branch_sites.py`` where the training
   runs in the branches of an ``if``: a prepare in each branch that trains) and ``accelerator_home.py`` decision 4;
   ``data_checks.py`` checks the result; ``data_passes.py`` says which loops over data decide nothing: bystanders,
   statistics passes, generators feeding the training);
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

from accelify.codemods.analysis.data_checks import TrainingDataChecks
from accelify.codemods.analysis.data_passes import DataPasses
from accelify.codemods.analysis.distributed import find_distributed
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Scope
from accelify.codemods.analysis.flow import loader_mapping
from accelify.codemods.analysis.loader_holders import Inline
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.penalties import penalty_backward
from accelify.codemods.analysis.prepare_site import PREPARED_ROLES, PrepareSite
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.problems import (  # the kinds rules/refusals.py reads as ``plan.KIND``
    BUILT_ELSEWHERE,
    CREATED_AFTER_LOOP,
    HELD_BY_A_METHOD,
    MODEL_IN_LOOP,
    MODELS_IN_A_COLLECTION,
    NOT_A_LOADER,
    PENALTY_ALONE,
    REBUILT_BY_A_METHOD,
    SCHEDULER_IN_LOOP,
    SECOND_EXPERIMENT,
    SELF_TRAINING_MODULE,
    SEVERAL_TRAINERS,
    TRAININGS_IN_BRANCHES,
    UNKNOWN_DATA,
    UNSHARDED,
    Problem,
)
from accelify.codemods.analysis.role_assignment import RoleAssignment
from accelify.codemods.analysis.roles import strip_placement
from accelify.codemods.analysis.schedules import per_batch
from accelify.codemods.analysis.training_functions import FunctionSite
from accelify.codemods.analysis.alias_names import Rebind
from accelify.codemods.analysis.trainer_choice import View
from accelify.codemods.analysis.snippets import code_of

__all__ = [
    "BUILT_ELSEWHERE", "CREATED_AFTER_LOOP", "HELD_BY_A_METHOD", "MODEL_IN_LOOP", "MODELS_IN_A_COLLECTION", "NOT_A_LOADER", "PENALTY_ALONE", "PREPARED_ROLES",
    "REBUILT_BY_A_METHOD", "SCHEDULER_IN_LOOP", "SECOND_EXPERIMENT", "SELF_TRAINING_MODULE", "SEVERAL_TRAINERS", "TRAININGS_IN_BRANCHES", "UNKNOWN_DATA", "UNSHARDED",
    "Alias", "Plan", "Problem",
]

T = TypeVar("T")


class Plan(RoleAssignment, PrepareSite, TrainingDataChecks, DataPasses):
    """The roles of names, the prepare site and the home of the accelerator, derived once from ``Facts``
    (the questions rules ask about the result are ``PreparedUses``'s)."""

    def __init__(self, facts: Facts, view: View | None = None) -> None:
        # ``view``: one of several trainers chosen by a flag, converted on its own (``trainer_choice.py``); the
        # others' territories are bystanders to it
        self.view = view
        self.rebuilt: list[Binding] = []  # holders of loaders (a dict of them) made again right after prepare
        self.wrapped: list[Inline] = []  # ``cycle(DataLoader(...))``, ``for x in DataLoader(...)``: prepared where built
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
        self.rebinds: list[Rebind] = []  # ``model = embedding_net`` again after prepare (``alias_names.py``)
        # other branches of an ``if`` that train (``analysis/branch_sites.py``): the same prepare after the last object
        # each builds (block, statement), and the block, before that ``if``, where the accelerator is made
        self.branch_sites: list[tuple[list[cst.BaseStatement], cst.BaseStatement | None]] = []
        self.accelerator_block: list[cst.BaseStatement] | None = None
        self.function_sites: list[FunctionSite] = []  # other training functions, each preparing its own objects
        self.function_caller: Scope | None = None  # the one scope that calls every training function
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
            self._check_collections()

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

    # the objects to prepare ---------------------------------------------------------------------
    def _find_objects(self) -> list[Binding]:
        optimizers = [o for o in self.bindings_with_role("optimizer") if not self.bystander(o.where)]
        objects: list[Binding] = []
        self.pass_loops: set[int] = set()  # ``for`` nodes each pass of which builds and trains a model of its own
        for optimizer in optimizers:
            if optimizer.loop is not None and self._trains_per_pass(optimizer):
                self.pass_loops.add(id(optimizer.loop.node))
            elif optimizer.loop is not None:
                self._problem(MODEL_IN_LOOP, optimizer.stmt, name=optimizer.key)
            objects.append(optimizer)
            for where, owner in self.trained_by(optimizer):
                model = self.origin(where, owner)
                if model is None and self._model_collection(where, owner):
                    # ``nets = [Net(), Net(bn=True)]`` and an optimizer per net: prepare cannot take the list's models
                    # where they are used, and unprepared they would train as N independent copies
                    self._problem(MODELS_IN_A_COLLECTION, optimizer.stmt, name=dotted(owner) or "the models")
                if model is not None and model.role == "model" and model not in objects:
                    handed = isinstance(owner, cst.Name) and owner.value in where.param_names \
                        and optimizer.where is where and where.kind == "function"
                    if model.loop is not None and not handed and id(model.loop.node) not in self.pass_loops:  # (``train(model, data)`` called per fresh model,
                        # building its own optimizer over the model it is handed: prepared per call, where it trains)
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
            if self._written_out(loader, [lp for lp, found in walked if found is loader]):
                continue  # an evaluation that writes a file per item: every process walks all of it, unprepared
            if self._per_sample(loader, [lp for lp, found in walked if found is loader]):
                continue  # an evaluation per sample at batch size 1 (a PSNR per image): all of it, unprepared
            if self._pass_indexed(loader, [lp for lp, found in walked if found is loader]):
                continue  # an evaluation pairing a list with its batches by the loop's index: all of it, unprepared
            if self._grouped(loader, [lp for lp, found in walked if found is loader]):
                continue  # an evaluation reading each batch's first row as special (NCF): all of it, unprepared
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

    def _trains_per_pass(self, optimizer: Binding) -> bool:
        """Whether each pass of the loop that builds ``optimizer`` is a training of its own: every model it trains is
        built in the same pass (a k-fold loop: model, optimizer and loaders per fold), and the loop trains after them
        (its epochs inside). Each pass is then prepared where its objects are built; an optimizer rebuilt per epoch
        over a model built once is not this (ACC007)."""
        loop = optimizer.loop
        assert loop is not None
        owners = self.trained_by(optimizer)
        if not owners:
            return False
        for where, owner in owners:
            model = self.origin(where, owner)
            key = dotted(owner)
            # the name the pass binds (``model = create_backbone(2)``, a factory elsewhere making it) or the model itself
            local = self.facts.last_binding_before(where, key, optimizer.stmt) if key is not None else None
            if model is None or where is not optimizer.where or not any(
                    b is not None and b.loop is loop for b in (model, local)):
                return False
        start = self.facts.order[optimizer.stmt][1]
        return any(self.facts.order[site.stmt][0] > start and self.reaches_backward(site) for site in loop.calls)

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
