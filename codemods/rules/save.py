"""SaveOnMain: checkpoints are written once, from the unwrapped model, after every process is done.

The barrier before a save is a collective: it goes only where every process reaches it alike. A save in a method
of a logger class (``analysis/file_writes.py`` ``logger_class``), whose calls the writes rule runs on the main
process only, gets it before each call of the method instead.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.blocks import outside_open, previous
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression, on_main_process, unwrap
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.dataset_kinds import dataset_class
from accelify.codemods.analysis.file_writes import barrier_places, later_reads, logger_class, main_only
from accelify.codemods.analysis.handle_uses import alone
from accelify.codemods.analysis.roles import module_method
from accelify.codemods.analysis.share_walks import walks_a_share
from accelify.codemods.engine.rule import Example, Rule


class SaveOnMain(Rule):
    name = "save"
    description = "Save through the accelerator, from the unwrapped model, after wait_for_everyone()."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "checkpoint.pt")
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.wait_for_everyone()
accelerator.save({"model": accelerator.unwrap_model(model).state_dict(), "optimizer": optimizer.state_dict()}, "checkpoint.pt")
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
stats = {"steps": 4}
torch.save(stats, "stats.pt")  # accelify: skip
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
stats = {"steps": 4}
torch.save(stats, "stats.pt")  # accelify: skip
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # the best score so far, over each process's share of the validation set (a phase loop over a dict of
            # loaders, both prepared): a test the processes may decide differently, so the barrier goes before it
            before='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader_train = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2, shuffle=True)
loader_valid = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
loaders = {"train": loader_train, "valid": loader_valid}
best = float("inf")
for epoch in range(2):
    for phase in ["train", "valid"]:
        losses = []
        for x, y in loaders[phase]:
            optimizer.zero_grad()
            with torch.set_grad_enabled(phase == "train"):
                loss = torch.nn.functional.mse_loss(model(x), y)
                if phase == "train":
                    loss.backward()
                    optimizer.step()
                else:
                    losses.append(loss.item())
        if phase == "valid":
            score = np.mean(losses)
            if score < best:
                best = score
                torch.save(model.state_dict(), "best.pt")
''',
            after='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader_train = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2, shuffle=True)
loader_valid = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, optimizer, loader_train, loader_valid = accelerator.prepare(
    model, optimizer, loader_train, loader_valid
)
loaders = {"train": loader_train, "valid": loader_valid}
best = float("inf")
for epoch in range(2):
    for phase in ["train", "valid"]:
        losses = []
        for x, y in loaders[phase]:
            optimizer.zero_grad()
            with torch.set_grad_enabled(phase == "train"):
                loss = torch.nn.functional.mse_loss(model(x), y)
                if phase == "train":
                    accelerator.backward(loss)
                    optimizer.step()
                else:
                    losses.append(accelerator.reduce(loss.detach(), "mean").item())
        if phase == "valid":
            score = np.mean(losses)
            accelerator.wait_for_everyone()
            if score < best:
                best = score
                accelerator.save(accelerator.unwrap_model(model).state_dict(), "best.pt")
accelerator.end_training()
''',
        ),
    )

    def run(self, ctx: Context) -> None:
        waited: set[cst.BaseStatement] = set()
        for site in ctx.facts.calls:
            if site.qualname != "torch.save":
                continue
            if ctx.plan.distributed.keeps_save(ctx.facts, site):  # main-only code the script distributed by hand
                self._unwrap_in_callers(ctx, site)
                continue
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None and _save_at_calls(ctx, site, waited):
                continue  # ``model.save_model(path)``: a model's own method, run on the main process at its calls
            if accelerator is None and ctx.accelerating and _save_on_main_state(ctx, site):
                continue  # ``torch.save(self, path)`` in ``net.save(path)``, whose calls cannot be followed
            if accelerator is None or not ctx.after_accelerator(site.scope, site.stmt):
                continue  # (where threading could not bring the accelerator, the leftovers rule reports it: ACC009)
            if not ctx.replace(site.node.func, site.stmt, lambda _, a=accelerator: expression(f"{a}.save")):  # type: ignore[misc]
                continue
            self._unwrap_models(ctx, site, accelerator)
            # the barrier is a collective: only where every process gets (a branch on a local value would hang),
            # and outside the `with open(...)` around the save (the writes rule puts it on the main process)
            anchor = outside_open(ctx.facts, site.stmt)
            before = previous(ctx.facts, site.stmt, ctx.facts.unit_of(site.scope).module)
            cls = site.scope.class_scope
            if cls is not None and logger_class(ctx.plan, cls):
                _wait_at_calls(ctx, site.scope, waited)  # its calls run on the main process only: no barrier in it
            elif cls is not None and dataset_class(ctx.facts, cls):
                pass  # a data set's cache: no training step to wait for, and its construction runs under
                # main_process_first (rules/dataset_files.py), where a barrier would leave the processes apart
            elif before is None or before not in waited:
                _wait_before(ctx, anchor, site.scope, accelerator, waited)
            waited.add(site.stmt)
            ctx.change("save with accelerator.save after wait_for_everyone()")

    def _unwrap_models(self, ctx: Context, site: CallSite, accelerator: str, saved: cst.BaseExpression | None = None) -> None:
        """``model.state_dict()`` / ``model`` of a prepared model -> through ``accelerator.unwrap_model``, in
        the saved value (``saved``, default the first argument) or in the dict a name saved here was built as
        (``state = {"model": ...}``)."""
        if saved is None and not site.node.args:
            return
        pending: list[tuple[cst.BaseExpression, cst.BaseStatement]] = [(saved or site.node.args[0].value, site.stmt)]
        followed: set[int] = set()
        while pending:
            expr, stmt = pending.pop()
            if isinstance(expr, cst.Dict):
                pending.extend((e.value, stmt) for e in expr.elements if isinstance(e, cst.DictElement))
            elif isinstance(expr, (cst.Tuple, cst.List)):
                pending.extend((e.value, stmt) for e in expr.elements)
            elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "state_dict":
                if self._is_model(ctx, site, expr.func.value):
                    self._unwrap(ctx, expr.func.value, stmt, accelerator)
            elif self._is_model(ctx, site, expr):
                self._unwrap(ctx, expr, stmt, accelerator)
            elif isinstance(expr, cst.Call) and (made := ctx.facts.sites.get(expr)) is not None \
                    and (helper := ctx.plan.callee(made)) is not None:
                # ``utils.get_training_state(config, gat)``, a function of the program that builds what is saved
                # from the model it is handed (``"state_dict": model.state_dict()``): it is handed the unwrapped one
                for param in helper.param_names:
                    arg = ctx.plan.arg_for(made, helper, param) if helper.calls_method_of(param, ("state_dict",)) else None
                    if arg is not None and self._is_model(ctx, site, arg.value):
                        self._unwrap(ctx, arg.value, stmt, accelerator)
            elif isinstance(expr, cst.Name) and id(expr) not in followed:
                followed.add(id(expr))
                binding = ctx.facts.last_binding_before(site.scope, expr.value, site.stmt)  # each branch's own
                if binding is not None and isinstance(binding.value, (cst.Dict, cst.Tuple, cst.List, cst.Call)):
                    pending.append((binding.value, binding.stmt))

    @staticmethod
    def _unwrap(ctx: Context, node: cst.BaseExpression, stmt: cst.BaseStatement, accelerator: str) -> None:
        if not ctx.edits.replaced(node):  # two saves of one ``state`` dict unwrap its model once
            ctx.replace(node, stmt, lambda n, a=accelerator: unwrap(n, a))  # type: ignore[misc]

    def _unwrap_in_callers(self, ctx: Context, site: CallSite) -> None:
        """``save_checkpoint({"state_dict": model.state_dict(), ...})`` where ``save_checkpoint`` saves its parameter:
        the caller's prepared models are unwrapped in what it hands over."""
        saved = site.node.args[0].value if site.node.args else None
        if not isinstance(saved, cst.Name) or saved.value not in site.scope.param_names:
            return
        for call in ctx.plan.call_sites(site.scope):
            arg = ctx.plan.arg_for(call, site.scope, saved.value)
            accelerator = ctx.accelerator_in(call.scope)
            if arg is not None and accelerator is not None:
                self._unwrap_models(ctx, CallSite(call.node, None, None, call.stmt, call.scope, call.loop, call.no_grad),
                                    accelerator, arg.value)

    def _is_model(self, ctx: Context, site: CallSite, expr: cst.BaseExpression) -> bool:
        return ctx.plan.prepared_model(site.scope, expr, site.stmt) is not None


def _save_at_calls(ctx: Context, site: CallSite, waited: set[cst.BaseStatement]) -> bool:
    """``torch.save({...: self.state_dict()}, filename)`` in a model's own method (``Net.save_model``), which the
    accelerator is not threaded into (``rules/threading.py``): each call, a statement of its own where the
    accelerator exists, becomes ``accelerator.wait_for_everyone()`` then ``if accelerator.is_main_process:
    accelerator.unwrap_model(model).save_model(path)`` (the unwrapped model's keys, written once). True when every
    call was; where one cannot be, nothing is changed (the leftovers rule reports the save: ACC009)."""
    method = site.scope
    if not module_method(method, ctx.facts.classes):
        return False
    calls = ctx.plan.call_sites(method)
    ready = []
    for call in calls:
        accelerator = ctx.accelerator_in(call.scope)
        func = call.node.func
        if accelerator is None or not ctx.after_accelerator(call.scope, call.stmt) or ctx.is_skipped(call.stmt) \
                or not isinstance(func, cst.Attribute) or not alone(call):
            return False
        ready.append((call, accelerator, func.value))
    if not ready:
        return False
    for call, accelerator, receiver in ready:
        if call.stmt in waited:
            continue
        prepared = ctx.plan.prepared_model(call.scope, receiver, call.stmt) is not None

        def guarded(stmt: cst.CSTNode, a: str = accelerator, p: bool = prepared) -> cst.CSTNode:
            assert isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr)
            call = stmt.body[0].value
            assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            inner = stmt.with_changes(body=[stmt.body[0].with_changes(value=call.with_changes(
                func=call.func.with_changes(value=unwrap(call.func.value, a))))]) if p else stmt
            return on_main_process(inner, a)

        if ctx.replace(call.stmt, call.stmt, guarded):
            _wait_before(ctx, call.stmt, call.scope, accelerator, waited)
            waited.add(call.stmt)
    ctx.change("save with the model's own method on the main process, after wait_for_everyone()")
    return True


def _save_on_main_state(ctx: Context, site: CallSite) -> bool:
    """``torch.save(self, path)`` in code the accelerator does not reach (N4's ``BasicDependencyParser.save``, called
    as ``net.save(path)`` on a model handed to ``train``: its calls cannot be followed, or one cannot be kept to the
    main process): ``if PartialState().is_main_process:`` around the save (the runtime's process state; a prepared
    model's method runs on the module it wraps, so ``self`` is the unwrapped model), and a
    ``PartialState().wait_for_everyone()`` before a later call of the function handed the same path (a read), where
    every process reaches it. Not in a function nothing calls, nor in one every call of which is where the
    accelerator is (the writes rule keeps such calls to the main process), nor in one that walks a prepared loader
    (each process would save its own share), nor where the state cannot be made as the accelerator is
    (``cpu=not args.cuda``): False, and the leftovers rule reports it (ACC009)."""
    scope = site.scope
    if scope.kind != "function" or scope.name == "__init__" or not alone(site) or not _may_run(ctx, scope) \
            or walks_a_share(ctx.plan, scope) or ctx.plan.in_other_trainer(scope):
        return False
    stmt = outside_open(ctx.facts, site.stmt)
    if ctx.is_skipped(stmt) or main_only(ctx.plan, ctx.facts, ctx.edits, scope, stmt):
        return False
    calls = ctx.plan.call_sites(scope)
    if calls and all(ctx.accelerator_in(c.scope) is not None and ctx.after_accelerator(c.scope, c.stmt) for c in calls):
        return False  # its calls are where the accelerator is: kept to the main process there (the writes rule), or reported
    state = ctx.process_state()
    if state is None:
        return False
    places = []
    for read in later_reads(ctx.facts, site):
        place = ctx.agreement.collective_place(read.stmt, scope, movable=True, after=stmt)
        if place is None:
            return False
        places.append(place)
    if not ctx.replace(stmt, stmt, lambda s, a=state: on_main_process(s, a)):  # type: ignore[misc]
        return False
    for place in barrier_places(ctx.facts, places):
        ctx.insert_before(place, [f"{state}.wait_for_everyone()"])
    ctx.import_state(scope.unit)
    ctx.change("save on the main process only (PartialState)")
    return True


def _may_run(ctx: Context, function: Scope) -> bool:
    """Whether ``function`` may run: a call of it is found, or (a method) its name is read as an attribute somewhere
    (``net.save(path)`` on a model whose class cannot be followed), or (a function) its name is read."""
    if ctx.plan.call_sites(function):
        return True
    if function.class_scope is None:
        return not ctx.plan.never_run(function)
    name = function.name
    return any(attribute.attr.value == name for scope in ctx.facts.scopes for attribute, _ in scope.attributes)


def _wait_at_calls(ctx: Context, method: Scope, waited: set[cst.BaseStatement]) -> None:
    """A save in a method of a logger class (``Logger.save_models``): the writes rule makes the logger on the main
    process only and runs each statement calling its methods there, so a barrier inside would be reached by the main
    process alone (a hang). The barrier goes before each statement that calls the method instead, outside that
    guard, where every process reaches it alike (``accelerator.wait_for_everyone()`` then ``if
    accelerator.is_main_process: logger.save_models(G, D, epoch)``); a call from the class itself gets none."""
    for call in ctx.plan.call_sites(method):
        accelerator = ctx.accelerator_in(call.scope)
        if accelerator is None or call.scope.class_scope is method.class_scope or call.stmt in waited \
                or not ctx.after_accelerator(call.scope, call.stmt) or ctx.is_skipped(call.stmt):
            continue
        if _wait_before(ctx, outside_open(ctx.facts, call.stmt), call.scope, accelerator, waited):
            waited.add(call.stmt)


def _wait_before(ctx: Context, anchor: cst.BaseStatement, scope: Scope, accelerator: str,
                 waited: set[cst.BaseStatement]) -> bool:
    """``accelerator.wait_for_everyone()`` before ``anchor``, or before the outermost condition around it that the
    processes may take differently (``if mean_dsc > best:`` on one process's share of the validation: the barrier
    goes before that test, which every process reaches); True when placed. Where no place is reached alike (the
    save's function is called under such a condition), there is no barrier: the save needs none to be right (only
    the main process writes, and the parameters it writes agree on every process after each step), and one only
    some processes reach would hang the others. Nor is one moved out of main-process code the script distributed by
    hand (``if rank == 0:``): its author placed the waits, and one before it would run at every step it is in."""
    place = ctx.agreement.collective_place(anchor, scope, movable=True)
    if place is None or (place is not anchor and ctx.plan.distributed.main_only(ctx.facts, anchor, scope) is not None):
        return False  # (main-process code the script distributed by hand: where it waits is the author's to say)
    if place not in waited:
        ctx.insert_before(place, [f"{accelerator}.wait_for_everyone()"])
        waited.add(place)
    return True
