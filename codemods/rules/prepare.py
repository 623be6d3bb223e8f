"""InsertPrepare: one ``accelerator.prepare(...)`` after the last model/optimizer/loader/scheduler is
created, before the first training loop.

Models, then optimizers, then data loaders, then schedulers, each in creation order; a long call is
split over lines the way black would.

Schedulers (``plan.objects``, decided by ``analysis/schedules.per_batch``): a prepared scheduler moves
``num_processes`` times per ``step()`` call (Accelerate's ``AcceleratedScheduler``, ``split_batches=False``), which
is right for one stepped once per batch: each process walks 1/N of the batches. One stepped once per epoch is
left out, and steps as in the original, once per epoch on every process (prepared, a ``StepLR(step_size=2)``
would decay every epoch on 2 processes).

A per-batch schedule's length computed from the loader (``OneCycleLR(total_steps=epochs * len(loader))``,
``T_max``, ``num_training_steps``) needs no change: ``prepare`` goes after the scheduler is built, so
``len(loader)`` there is the unprepared loader's, B batches; on N processes each process walks about B/N of
them per epoch and each call moves N steps, B per epoch, the length the original planned (with uneven
batches at most N - 1 more, which the scheduler stops at its ``total_steps``). Computed from a prepared
loader it would be N times too short; this rule never puts ``prepare`` before the scheduler it receives. Nor
before a per-epoch one it leaves out that reads a loader's length (SimCLR's ``CosineAnnealingLR(optimizer,
T_max=len(train_loader))``, stepped once per epoch): that length must stay the original's too
(``PrepareSite._after_sized_schedulers``); such a scheduler holds the optimizer ``prepare`` wraps, whose
``param_groups`` are the prepared optimizer's.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.flow import loader_mapping
from accelify.codemods.analysis.snippets import code_of

from accelify.codemods.analysis.statement_shapes import is_docstring
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.training_functions import FunctionSite
from accelify.codemods.engine.rule import Example, Rule

LINE_LENGTH = 88


class InsertPrepare(Rule):
    name = "prepare"
    description = "Prepare every model, optimizer, data loader and per-batch scheduler in one call."
    examples = (
        Example(
            before='''\
import torch
from torch.optim.lr_scheduler import StepLR
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.Adam(model.parameters())
scheduler = StepLR(optimizer, step_size=1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    scheduler.step()
''',
            after='''\
import torch
from torch.optim.lr_scheduler import StepLR
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.Adam(model.parameters())
scheduler = StepLR(optimizer, step_size=1)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    scheduler.step()
accelerator.end_training()
''',
        ),
        Example(
            # stepped once per epoch, after a helper that trains: left out of prepare, it steps as it did
            before='''\
import torch
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader, optimizer):
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
scheduler = StepLR(optimizer, step_size=2)
for epoch in range(3):
    train(model, loader, optimizer)
    scheduler.step()
''',
            after='''\
import torch
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator()


def train(model, loader, optimizer):
    for x, y in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
scheduler = StepLR(optimizer, step_size=2)
for epoch in range(3):
    train(model, loader, optimizer)
    scheduler.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
params = torch.nn.Linear(2, 1).parameters()
ordered = list(params)
print(len(ordered))
''',
            fires=False,
        ),
        Example(  # experiments one after another (a notebook's): each later one is prepared where it is built
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("sgd", loss.item())

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("adam", loss.item())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
accelerator.print("sgd", loss.item())

model = torch.nn.Linear(2, 1)
model = accelerator.prepare(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
optimizer = accelerator.prepare(optimizer)
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
accelerator.print("adam", loss.item())
accelerator.end_training()
''',
        ),
        Example(  # loaders stored into a dict's items after ``{}`` made it, before prepare: prepared with the model
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loaders = {}
loaders["train"] = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4, shuffle=True)
loaders["valid"] = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loaders["train"]:
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loaders = {}
loaders["train"] = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4, shuffle=True)
loaders["valid"] = DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loaders["train"], loaders["valid"] = accelerator.prepare(
    model, optimizer, loaders["train"], loaders["valid"]
)
for (x,) in loaders["train"]:
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
    )

    def run(self, ctx: Context) -> None:
        plan = ctx.plan
        joined: list[str] = []  # the items of dicts filled before prepare, prepared with the model and optimizer
        for loader in plan.in_place:  # rebuilt every epoch: prepared every time, right where it is built
            accelerator = ctx.accelerator_in(loader.where)
            filled = plan.filled.get(id(loader))
            items = _joined_items(ctx, loader, filled.keys) if filled is not None else None
            if items is not None:
                joined += items
            elif filled is not None:  # ``loaders = {}`` then its items: after the last
                if accelerator is not None:
                    indent = _depth(ctx, [filled.after]) * _indent(ctx, loader.where)
                    ctx.insert_after(filled.after, [_prepare_code(filled.items(), accelerator, indent)])
                    ctx.change(f"prepare the loaders stored in {loader.key} after the last is stored")
                else:
                    _prepare_where_received(ctx, loader, filled.keys)
            elif accelerator is not None and isinstance(loader.stmt, cst.SimpleStatementLine):
                if loader_mapping(loader):  # ``dataloaders = {"train": ..., "val": ...}``: each one
                    code = f"{loader.key} = {{k: {accelerator}.prepare(v) for k, v in {loader.key}.items()}}"
                else:
                    code = f"{loader.key} = {accelerator}.prepare({loader.key})"
                ctx.insert_after(loader.stmt, [code])
                ctx.change(f"prepare {loader.key} where it is built")
            elif loader_mapping(loader):
                _prepare_where_received(ctx, loader, None)
        _wrap_inline(ctx)
        scope = plan.prepare_scope
        accelerator = ctx.accelerator_in(scope) if scope is not None else None
        if scope is None or accelerator is None or not plan.aliases:
            return
        # one name for every object it holds (an optimizer built in either branch of an ``if``): listed once, since
        # a name passed twice comes back as two wrappers of one object
        names = list(dict.fromkeys(a.spelled for a in plan.aliases))
        schedulers = [i for i, a in enumerate(plan.aliases) if a.obj.role == "scheduler"]
        at = names.index(plan.aliases[schedulers[0]].spelled) if schedulers else len(names)
        names[at:at] = joined  # models, optimizers, loaders, schedulers
        code = _prepare_code(names, accelerator, _depth(ctx, plan.prepare_block) * _indent(ctx, scope))
        # ``loaders = {"train": train, "valid": valid}`` made before prepare holds the old loaders: made again after it
        again = [code_of(b.stmt).strip() for b in plan.rebuilt]
        again += [f"{r.alias} = {r.prepared}" for r in plan.rebinds]  # a second name that trains: the prepared one
        block = plan.prepare_block
        following = block[block.index(plan.prepare_after) + 1:] if plan.prepare_after in block else []
        if following and ctx.edits.vanishes(following[0]):
            # the wrap it replaces went (``if ddp: model = DDP(model)``, apex's ``amp.initialize``): it takes its place
            ctx.insert_before(following[0], [code, *again])
        elif plan.prepare_after is not None:
            ctx.insert_after(plan.prepare_after, [code, *again])
        else:  # every object arrives as a parameter: prepare them first thing
            block = plan.prepare_block
            first = 1 if len(block) > 1 and is_docstring(block[0]) else 0
            ctx.insert_before(block[first], [code])  # after an accelerator created there too (it is inserted first)
        for other, after in plan.branch_sites:  # another branch that trains: the same prepare after its objects
            code = _prepare_code(names, accelerator, _depth(ctx, other) * _indent(ctx, scope))
            if after is not None:
                ctx.insert_after(after, [code])
            else:
                ctx.insert_before(other[0], [code])
        ctx.change(f"prepare {', '.join(names)}")
        for site in plan.function_sites:  # another training function: it prepares what it trains
            _prepare_in_function(ctx, site)
        for binding in plan.rebuilt:
            ctx.change(f"make {binding.key} again after prepare, with the prepared loaders")
        for rebind in plan.rebinds:
            ctx.change(f"bind {rebind.alias} to the prepared {rebind.prepared}: the training goes on through it")


def _prepare_in_function(ctx: Context, site: FunctionSite) -> None:
    """A training function of several (``analysis/training_functions.py``): its own prepare, after the last object it
    builds, or first thing where it is handed them all."""
    accelerator = ctx.accelerator_in(site.scope)
    if accelerator is None:
        ctx.abort(codes.BUILT_ELSEWHERE, site.scope.node, name=site.aliases[0].key)
    names = list(dict.fromkeys(a.spelled for a in site.aliases))
    code = _prepare_code(names, str(accelerator), _depth(ctx, site.block) * _indent(ctx, site.scope))
    if site.after is not None:
        ctx.insert_after(site.after, [code])
    else:
        first = 1 if len(site.block) > 1 and is_docstring(site.block[0]) else 0
        ctx.insert_before(site.block[first], [code])
    ctx.change(f"prepare {', '.join(names)} in {site.scope.name}")


def _received(ctx: Context, loader: Binding) -> list[Binding]:
    """The bindings of other names, in scopes that have the accelerator, to the dict ``loader`` makes (``loaders =
    make_loaders(4)``)."""
    return [b for b in ctx.facts.bindings() if b is not loader and b.unpacked is None and "." not in b.key
            and isinstance(b.stmt, cst.SimpleStatementLine) and ctx.accelerator_in(b.where) is not None
            and ctx.plan.holds(b) is loader]


def _joined_items(ctx: Context, loader: Binding, keys: list[str]) -> list[str] | None:
    """``loaders["train"]``, ... when the dict filled item by item is in hand where prepare goes, before it (made in
    the prepare block, or bound there to what a helper returns): prepared in the one call with the model and
    optimizer, as a named loader would be, so what reads their length before it (a scheduler's ``total_steps``) reads
    the original's; None when it is not."""
    plan = ctx.plan
    block, last, scope = plan.prepare_block, plan.prepare_after, plan.prepare_scope
    if not plan.aliases or plan.branch_sites or last not in block or scope is None or ctx.accelerator_in(scope) is None:
        return None
    filled = plan.filled[id(loader)]
    for holder, at in [(loader, filled.after), *((b, b.stmt) for b in _received(ctx, loader))]:
        if holder.where is scope and at in block and block.index(at) <= block.index(last) \
                and len(scope.bindings.get(holder.key, [])) == 1:
            return [f"{holder.key}[{key}]" for key in keys]
    return None


def _prepare_where_received(ctx: Context, loader: Binding, keys: list[str] | None) -> None:
    """A dict of loaders built by a helper that has no accelerator (``loaders = make_loaders(4)`` in ``main``, which
    creates it): its items are prepared where a scope that has the accelerator binds what the helper returns, after the
    accelerator exists (``keys``: the known items of a dict filled item by item; None for one built in one literal).
    Where no such binding is found the file is refused rather than left walking all the data on every process."""
    received = _received(ctx, loader)
    if not received or not all(ctx.after_accelerator(b.where, b.stmt) for b in received):
        ctx.abort(codes.UNSHARDED, loader.stmt, name=f"{loader.key}[...]")
    for binding in received:
        accelerator = ctx.accelerator_in(binding.where)
        if keys is not None:
            items = [f"{binding.key}[{key}]" for key in keys]
            indent = _depth(ctx, [binding.stmt]) * _indent(ctx, binding.where)
            code = _prepare_code(items, str(accelerator), indent)
        else:
            code = f"{binding.key} = {{k: {accelerator}.prepare(v) for k, v in {binding.key}.items()}}"
        ctx.insert_after(binding.stmt, [code])
        ctx.change(f"prepare the loaders of {binding.key} where it receives them")


def _wrap_inline(ctx: Context) -> None:
    """``train_loader = cycle(DataLoader(...))``: the loader the wrapper is given is prepared right there
    (``cycle(accelerator.prepare(DataLoader(...)))``); where no accelerator exists yet at that statement the file is
    refused rather than left walking all the data on every process."""
    for inline in ctx.plan.wrapped:
        accelerator = ctx.accelerator_in(inline.scope)
        if accelerator is None or not ctx.will_be_after_accelerator(inline.scope, inline.stmt):
            ctx.abort(codes.UNSHARDED, inline.call, name=inline.name)
        ctx.replace_through(inline.scope, inline.call, inline.stmt, lambda node, acc: cst.Call(
            func=cst.Attribute(value=cst.parse_expression(acc), attr=cst.Name("prepare")), args=[cst.Arg(node)]))  # type: ignore[arg-type]
        ctx.change(f"prepare the loader {inline.name} walks where it is built")


def _prepare_code(names: list[str], accelerator: str, indent: str) -> str:
    joined = ", ".join(names)
    head = f"{joined} = {accelerator}.prepare("
    if len(indent) + len(head) + len(joined) + 1 <= LINE_LENGTH:
        return f"{head}{joined})"
    inner = indent + " " * 4
    if len(inner) + len(joined) <= LINE_LENGTH:
        return f"{head}\n    {joined}\n)"
    return head + "\n" + "".join(f"    {name},\n" for name in names) + ")"


def _depth(ctx: Context, block: list[cst.BaseStatement]) -> int:
    return len(ctx.facts.chain(block[0])) - 1 if block else 0


def _indent(ctx: Context, scope: Scope) -> str:
    return ctx.facts.unit_of(scope).module.default_indent
