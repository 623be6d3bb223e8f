"""LoadUnwrapped: loading weights into a prepared model goes through the unwrapped model, from CPU tensors.

Loading before ``prepare`` reads onto the CPU too (every process reads the file); an explicit
``map_location`` is kept. A load of a file this function saved
earlier, with no ``wait_for_everyone()`` since, gets one first: only the main process writes it.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression, unwrap
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.write_calls import COPIES
from accelify.codemods.engine.rule import Example, Rule
from accelify.codemods.analysis.blocks import opened_path, opening_with, outside_open, previous


class LoadUnwrapped(Rule):
    name = "load"
    description = "Load state dicts into the unwrapped model, with map_location='cpu'."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
torch.save(model.state_dict(), "net.pt")
model.load_state_dict(torch.load("net.pt"))
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
accelerator.save(accelerator.unwrap_model(model).state_dict(), "net.pt")
accelerator.wait_for_everyone()
accelerator.unwrap_model(model).load_state_dict(torch.load("net.pt", map_location="cpu"))
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
model.load_state_dict(torch.load("net.pt", map_location="cuda:0"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
model.load_state_dict(torch.load("net.pt", map_location="cuda:0"))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # read back under a test on the process's own score: no barrier can order the write and the read
            before='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
best = float("inf")
for epoch in range(2):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append([loss.item()])
    if np.mean(losses) < best:
        best = np.mean(losses)
        torch.save(model.state_dict(), "best.pt")
        model.load_state_dict(torch.load("best.pt"))
''',
            after='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
best = float("inf")
for epoch in range(2):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        losses.append([loss.item()])
    accelerator.wait_for_everyone()
    if np.mean(losses) < best:
        best = np.mean(losses)
        accelerator.save(accelerator.unwrap_model(model).state_dict(), "best.pt")
        accelerator.unwrap_model(model).load_state_dict(torch.load("best.pt", map_location="cpu"))
accelerator.end_training()
''',
            warnings=("ACC028:14", "ACC049:18"),
        ),
    )

    def run(self, ctx: Context) -> None:
        order = {site.node: i for i, site in enumerate(ctx.facts.calls)}
        saves = [s for s in ctx.facts.calls if s.qualname == "torch.save"]
        # a save's copy (``shutil.copyfile(last, best)``) is written by the main process alone too (rules/writes.py)
        written = [s for s in ctx.facts.calls if s.qualname == "torch.save" or s.qualname in COPIES]
        waited: set[cst.BaseStatement] = set()
        for site in ctx.facts.calls:
            func = site.node.func
            if site.method != "load_state_dict" or not isinstance(func, cst.Attribute):
                continue
            found = ctx.plan.prepared(site.scope, func.value, site.stmt)
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None:
                continue
            if found is None:
                raw = ctx.plan.origin(site.scope, func.value)
                if raw is not None and ctx.plan.is_prepared(raw) and ctx.after_accelerator(site.scope, site.stmt):
                    # loaded into the model before prepare: only the file's tensors go to the CPU first (every
                    # process reads it; as saved they would all land on the GPU that wrote it)
                    for load in self._loads_feeding(ctx, site):
                        ctx.replace(load.node, load.stmt, _map_to_cpu)
                        ctx.change('torch.load(..., map_location="cpu")')
                elif ctx.after_accelerator(site.scope, site.stmt):
                    # a model of its own (``new_model = Net()`` after the training, set V's V5) loaded from the file
                    # the script saved: every process reads it, after the main process wrote it
                    for load in self._loads_feeding(ctx, site, mapped=True):
                        if _reads_unwaited_save(ctx, load, written, order) or _saved_by_earlier_call(ctx, load, order):
                            self._read_after_write(ctx, load, accelerator, order, waited)
                continue
            if found.role == "model":
                ctx.replace(func.value, site.stmt, lambda n, a=accelerator: unwrap(n, a))  # type: ignore[misc]
                ctx.change("load into accelerator.unwrap_model(model)")
            for load in self._loads_feeding(ctx, site, mapped=True):
                self._read_after_write(ctx, load, accelerator, order, waited, written)
        self._whole_models(ctx, saves, order, waited)
        self._paths_handed_on(ctx, saves, order, waited)
        self._loaders_after_savers(ctx, order, waited)
        self._state_dicts(ctx)

    @staticmethod
    def _read_after_write(ctx: Context, load: CallSite, accelerator: str, order: dict[cst.Call, int], waited: set,
                          written: list[CallSite] | None = None) -> None:
        """``torch.load`` onto the CPU, after a barrier where it reads a file its function saved (or a call before
        it saves) with none since: only the main process writes, so the others must not read before it is there.
        ``written``: the saves to look for (None: the caller found one already)."""
        if _without_location(load):
            ctx.replace(load.node, load.stmt, _map_to_cpu)
            ctx.change('torch.load(..., map_location="cpu")')
        anchor = _read_anchor(ctx, load)
        unwaited = written is None or _reads_unwaited_save(ctx, load, written, order) \
            or _saved_by_earlier_call(ctx, load, order) or _saved_elsewhere(ctx, load, written)
        place = _barrier_place(ctx, load, anchor, order) if unwaited else None
        if unwaited and place is None and not ctx.is_skipped(anchor):
            ctx.warn(codes.LOAD_UNORDERED, load.node, name=code_of(load.node.func))
        elif place is not None and place not in waited and not ctx.is_skipped(place):
            ctx.insert_before(place, [f"{accelerator}.wait_for_everyone()"])
            waited.add(place)

    @staticmethod
    def _paths_handed_on(ctx: Context, saves: list[CallSite], order: dict[cst.Call, int], waited: set) -> None:
        """``torch.save(sd, model_path)`` then ``evaluate(model_path, ...)`` in the same block: the function handed
        the path just saved reads it (cleanrl's evaluation after training), and only the main process writes it,
        so every process waits for the file first."""
        for save in saves:
            path = _path_arg(save.node, "f", 1)
            accelerator = ctx.accelerator_in(save.scope)
            if not isinstance(path, cst.Name) or accelerator is None or ctx.is_skipped(save.stmt):
                continue
            block = ctx.facts.parent_stmt.get(save.stmt)
            for site in ctx.facts.calls:
                if (site.scope is not save.scope or order[site.node] <= order[save.node] or site.stmt in waited
                        or ctx.facts.parent_stmt.get(site.stmt) is not block or ctx.is_skipped(site.stmt)):
                    continue  # a call in a branch some processes skip would leave the others waiting
                reader = site.qualname == "torch.load" or (
                    isinstance(site.node.func, cst.Name) and site.node.func.value not in _NOT_READERS)
                if reader and any(code_of(a.value) == path.value for a in site.node.args) and _reads_unwaited_save(
                        ctx, site, saves, order, path):
                    if ctx.agreement.collective_place(site.stmt, site.scope) is None:  # save and read under one local test
                        ctx.warn(codes.LOAD_UNORDERED, site.node, name=code_of(site.node.func))
                        continue
                    ctx.insert_before(site.stmt, [f"{accelerator}.wait_for_everyone()"])
                    ctx.change("wait for the saved file before a function that reads it")
                    waited.add(site.stmt)

    @staticmethod
    def _loaders_after_savers(ctx: Context, order: dict[cst.Call, int], waited: set) -> None:
        """``model.save_model("net.pt")`` then ``Net.load_model("net.pt")``: functions of the program that save and
        load (a model's own methods), called with the same path in one function. Only the main process saves, so
        every process waits for the file before the call that reads it."""
        for site in ctx.facts.calls:
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None or not site.node.args or site.stmt in waited or ctx.is_skipped(site.stmt) \
                    or not _calls_load(ctx, site):
                continue
            path = code_of(site.node.args[0].value)
            savers = [s for s in site.scope.calls if order.get(s.node, len(order)) < order[site.node] and s.node.args
                      and code_of(s.node.args[0].value) == path and _calls_save(ctx, s)]
            if not savers:
                continue
            place = ctx.agreement.collective_place(site.stmt, site.scope, movable=True, after=savers[-1].stmt)
            if place is None:
                ctx.warn(codes.LOAD_UNORDERED, site.node, name=code_of(site.node.func))
            elif place not in waited:
                ctx.insert_before(place, [f"{accelerator}.wait_for_everyone()"])
                ctx.change("wait for the saved file before a function that reads it")
                waited.add(place)

    @staticmethod
    def _state_dicts(ctx: Context) -> None:
        """``target_net.load_state_dict(policy_net.state_dict())``, ``best = copy.deepcopy(model.state_dict())``:
        a prepared model's state dict read anywhere comes from the unwrapped model, so its keys are the
        model's own (a DDP wrapper's carry a ``module.`` prefix that no plain model loads)."""
        for site in ctx.facts.calls:
            func = site.node.func
            if site.method != "state_dict" or site.node.args or not isinstance(func, cst.Attribute) or ctx.edits.replaced(func.value):
                continue
            accelerator = ctx.accelerator_in(site.scope)
            found = ctx.plan.prepared_model(site.scope, func.value, site.stmt) if accelerator is not None else None
            if found is None and accelerator is None:
                accelerator = _through_instance(ctx, site, func.value)
                found = True if accelerator is not None else None
            if found is None or _unwrapped_already(func.value):
                continue
            if ctx.replace(func.value, site.stmt, lambda n, a=accelerator: unwrap(n, a)):  # type: ignore[misc]
                ctx.change("read state dicts from accelerator.unwrap_model(model)")

    def _whole_models(self, ctx: Context, saves: list[CallSite], order: dict[cst.Call, int], waited: set) -> None:
        """``model = torch.load(f)`` of a model the script saved whole (``torch.save(model, f)``): every
        process reads it after the main process wrote it, onto the CPU, then onto its own device."""
        for load in ctx.facts.calls:
            if load.qualname != "torch.load" or ctx.rewritten(load.node) or not _assigns_model(ctx, load):
                continue
            accelerator = ctx.accelerator_in(load.scope)
            if accelerator is None or not ctx.after_accelerator(load.scope, load.stmt):
                continue
            if any(a.keyword is not None and a.keyword.value == "map_location" for a in load.node.args):
                continue
            device = _device_name(ctx, load) or f"{accelerator}.device"
            ctx.replace(load.node, load.stmt, lambda n, d=device: _to_device(_map_to_cpu(n), d))  # type: ignore[misc]
            ctx.change('torch.load(..., map_location="cpu").to(device)')
            place = _barrier_place(ctx, load, _read_anchor(ctx, load), order)
            if any(order[s.node] < order[load.node] for s in saves) and place is None:
                ctx.warn(codes.LOAD_UNORDERED, load.node, name=code_of(load.node.func))
            elif any(order[s.node] < order[load.node] for s in saves) and place is not None and place not in waited:
                ctx.insert_before(place, [f"{accelerator}.wait_for_everyone()"])
                waited.add(place)

    def _loads_feeding(self, ctx: Context, site: CallSite, mapped: bool = False) -> list[CallSite]:
        """``torch.load`` calls without ``map_location`` whose result this call loads (directly or via a name); with
        ``mapped``, also those that name a location or other arguments (``weights_only=True``)."""
        if not site.node.args:
            return []
        value = site.node.args[0].value
        while isinstance(value, cst.Subscript):
            value = value.value
        if isinstance(value, cst.Name):
            binding = ctx.plan.binding_of(site.scope, value.value)
            value = binding.value if binding is not None and binding.value is not None else value
        load = ctx.facts.sites.get(value) if isinstance(value, cst.Call) else None
        if load is None or load.qualname != "torch.load" or ctx.rewritten(load.node):
            return []
        return [load] if mapped or _without_location(load) else []


def _without_location(load: CallSite) -> bool:
    """``torch.load(f)``, ``torch.load(f, weights_only=True)``: no location named (by keyword or by position), so
    ``map_location="cpu"`` can be added."""
    args = load.node.args
    return not any(a.keyword is not None and a.keyword.value == "map_location" for a in args) \
        and sum(a.keyword is None for a in args) == 1 and not any(a.star for a in args)


def _assigns_model(ctx: Context, load: CallSite) -> bool:
    """``model = torch.load(...)`` where ``model`` holds a model elsewhere in the program."""
    stmt = load.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign)):
        return False
    assign = stmt.body[0]
    if assign.value is not load.node or len(assign.targets) != 1:
        return False
    key = code_of(assign.targets[0].target)
    owner = load.scope.resolve(key.split(".")[0])
    return owner is not None and any(b.role == "model" for b in owner.bindings.get(key, []))


def _device_name(ctx: Context, load: CallSite) -> str | None:
    """``device`` when that name, in the load's scope, is the device variable (tied to the accelerator's)."""
    binding = ctx.plan.binding_of(load.scope, "device")
    return "device" if binding is not None and binding.role == "device" else None


def _to_device(node: cst.CSTNode, device: str) -> cst.CSTNode:
    assert isinstance(node, cst.BaseExpression)
    return cst.Call(func=cst.Attribute(node, cst.Name("to")), args=[cst.Arg(expression(device))])


# plain functions handed a path that do not read the file
_NOT_READERS = {"print", "str", "repr", "len", "format", "isinstance", "type", "dict", "list", "tuple"}


def _reads_unwaited_save(ctx: Context, load: CallSite, saves: list[CallSite], order: dict[cst.Call, int],
                         path: cst.BaseExpression | None = None) -> bool:
    """Whether this load (or a call handed ``path``) reads a file saved earlier in its function with no
    ``wait_for_everyone`` between: the save rule puts one before every save that does not directly follow another
    save, and none after the last."""
    before = [s for s in saves if s.scope is load.scope and order[s.node] < order[load.node]]
    if not load.node.args:
        return False
    source = _file_of(ctx, load.stmt, path if path is not None else load.node.args[0].value)
    paths = [_path_arg(s.node, "f", 1) for s in before]
    matching = [i for i, (s, p) in enumerate(zip(before, paths)) if p is None or _file_of(ctx, s.stmt, p) == source]
    if not matching:
        return False
    statements = {s.stmt for s in saves}
    module = ctx.facts.unit_of(load.scope).module
    return not any(previous(ctx.facts, s.stmt, module) not in statements for s in before[matching[-1] + 1 :])


def _saved_elsewhere(ctx: Context, load: CallSite, saves: list[CallSite]) -> bool:
    """Whether a save in another function of the program writes the file ``load`` reads, named by the same string
    (set U's U1: ``train()`` saves the best weights to ``'best/model.pt'`` when the validation improves, and ``test()``,
    called after it, loads them back): only the main process writes, so the others must wait for the last write
    before they read it (without, process 1 read the previous epoch's file and the processes parted)."""
    if not load.node.args or not isinstance(load.node.args[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        return False
    source = code_of(load.node.args[0].value)
    return any(s.scope is not load.scope and (p := _path_arg(s.node, "f", 1)) is not None
               and isinstance(p, (cst.SimpleString, cst.ConcatenatedString)) and code_of(p) == source for s in saves)


def _saved_by_earlier_call(ctx: Context, load: CallSite, order: dict[cst.Call, int]) -> bool:
    """Whether a call before ``load`` in its function runs, through the program, a ``torch.save`` (the main process
    alone writes it once converted): ``early_stopping(val_loss, model)`` whose ``save_checkpoint`` saves the best
    weights, then ``model.load_state_dict(torch.load("checkpoint.pt"))``. The others must not read the file before
    the main process has written it (nor an older file of a previous run), so a barrier goes before the load."""
    return any(order.get(site.node, len(order)) < order[load.node] and _calls_save(ctx, site) for site in load.scope.calls)


def _barrier_place(ctx: Context, load: CallSite, anchor: cst.BaseStatement, order: dict[cst.Call, int]
                   ) -> cst.BaseStatement | None:
    """Where the barrier before ``load`` (read at ``anchor``) goes: ``anchor``, or before the outermost condition
    around it the processes may take differently, but never before a write of its function that comes earlier (a
    ``torch.save`` or a call that saves): the barrier orders the read after it. None when there is no such place
    (``agreement.collective_place``)."""
    earlier = [site.stmt for site in load.scope.calls if order.get(site.node, len(order)) < order[load.node]
               and (site.qualname == "torch.save" or _calls_save(ctx, site))]
    last = max(earlier, key=lambda stmt: ctx.facts.order[stmt][1], default=None)
    return ctx.agreement.collective_place(anchor, load.scope, movable=True, after=last)


def _calls_save(ctx: Context, site: CallSite) -> bool:
    """Whether ``site`` calls a function of the program that runs a ``torch.save`` (through the program)."""
    return _calls_through(ctx, site, "torch.save")


def _calls_load(ctx: Context, site: CallSite) -> bool:
    """Whether ``site`` calls a function of the program that runs a ``torch.load`` (through the program)."""
    return _calls_through(ctx, site, "torch.load")


def _calls_through(ctx: Context, site: CallSite, qualname: str) -> bool:
    """Whether ``site`` calls a function of the program that runs a call of ``qualname`` (through the program)."""
    known: dict[int, bool] = {}

    def runs(function: Scope) -> bool:
        if id(function) not in known:
            known[id(function)] = False  # a recursion reads "no" until it is known
            known[id(function)] = any(s.qualname == qualname or (
                (callee := ctx.plan.callee(s)) is not None and runs(callee)) for s in function.calls)
        return known[id(function)]

    callee = ctx.plan.callee(site)
    return callee is not None and runs(callee)


def _read_anchor(ctx: Context, load: CallSite) -> cst.BaseStatement:
    """The statement a barrier before ``load`` goes before: ``with open(path) as f:`` when the load reads ``f``
    (the other processes would open the file before the main process wrote it), else the load's own statement;
    either way outside any ``with open(...)`` directly around it."""
    opened = opening_with(ctx.facts, load.stmt, load.node.args[0].value) if load.node.args else None
    return outside_open(ctx.facts, opened if opened is not None else load.stmt)


def _file_of(ctx: Context, stmt: cst.BaseStatement, path: cst.BaseExpression) -> str:
    """The code of the path ``path`` names at ``stmt``: the opened path for the handle ``f`` of a
    ``with open(path) as f:`` around it, else ``path`` itself."""
    opened = opening_with(ctx.facts, stmt, path)
    inner = opened_path(opened, path) if opened is not None and isinstance(path, cst.Name) else None
    return code_of(inner if inner is not None else path)


def _path_arg(call: cst.Call, keyword: str, position: int) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None]
    return positional[position].value if len(positional) > position else None


def _map_to_cpu(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Call)
    arg = cst.Arg(
        cst.SimpleString('"cpu"'),
        keyword=cst.Name("map_location"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    return node.with_changes(args=[*node.args, arg])


def _through_instance(ctx: Context, site: CallSite, expr: cst.BaseExpression) -> str | None:
    """``agent.online_net`` where ``agent = Agent()`` once, and ``Agent.__init__`` prepares ``self.online_net``
    and holds the accelerator (``self.accelerator``): the accelerator as the caller reaches it
    (``agent.accelerator``), or None. A DQN script copying its agent's network into the target network
    (``agent.target_net.load_state_dict(agent.online_net.state_dict())``) otherwise reads the DDP wrapper's keys."""
    if not (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)):
        return None
    name = expr.value.value
    owner = site.scope.resolve(name)
    bindings = owner.bindings.get(name, []) if owner is not None else []
    if len(bindings) != 1 or not isinstance(bindings[0].value, cst.Call):
        return None
    made = ctx.facts.sites.get(bindings[0].value)
    init = ctx.plan.callee(made) if made is not None else None
    if init is None or init.name != "__init__" or init.parent is None or not init.body:
        return None
    held = ctx.edits.accelerators.get(init.parent) or ctx.edits.accelerators.get(init)
    if held is None or not held.startswith("self."):
        return None
    attribute = cst.Attribute(cst.Name("self"), cst.Name(expr.attr.value))
    site_scope = ctx.plan.prepare_scope
    if site_scope is None or (site_scope is not init and site_scope.class_scope is not init.parent) \
            or ctx.plan.model_object(init, attribute) is None:
        return None  # prepared in ``__init__``, or in the one method that trains (``Execute.train``, which builds the
        # optimizer and loaders): the instance holds the prepared model after it (before, unwrapping changes nothing)
    return f"{name}.{held[len('self.'):]}"


def _unwrapped_already(expr: cst.BaseExpression) -> bool:
    """``accelerator.unwrap_model(model)`` / ``model.module`` (the script unwraps it itself)."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "module":
        return True
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "unwrap_model"
