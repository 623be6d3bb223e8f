"""ReportLeftovers: after every rule has run, what no rule could convert is reported, so a miss is never silent.

- a ``backward``, a gradient clipping or a ``torch.save`` where the accelerator could not be brought (ACC009:
  threading passes it to the helpers it can; the rules that convert these leave the others alone); a function
  whose rank tests or collectives were rewritten through an accelerator it does not get refuses the file;
- a piece of the hand-written distributed set-up no rule took refuses the file (ACC003: never half-distributed);
- any ``.cuda()`` or ``.to(device)`` no rule converted (ACC001, ACC002).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.device_entries import device_entries

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.own_device import own_device
from accelify.codemods.analysis.seen_from import seen_from
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.roles import CLIPPING, is_module_scope, tensor_backward
from accelify.codemods.engine.rule import Example, Rule


class ReportLeftovers(Rule):
    name = "leftovers"
    description = "Warn about device placement no rule converted."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
def move(batch, dev):
    return batch.to(dev)
for x, y in loader:
    torch.nn.functional.mse_loss(model(move(x, "cpu")), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
def move(batch, dev):
    return batch.to(dev)
for x, y in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(move(x, "cpu")), y))
    optimizer.step()
accelerator.end_training()
''',
            warnings=('ACC002:7',),
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x = x.to(torch.float64).float()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    x = x.to(torch.float64).float()
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class ToGPU:
    def __call__(self, batch):
        return [t.cuda() for t in batch]


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Linear(8, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    to_gpu = ToGPU()
    for x, y in loader:
        x, y = to_gpu((x, y))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


class ToGPU:
    def __call__(self, batch):
        return [t.cuda() for t in batch]


def main():
    accelerator = Accelerator()
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    to_gpu = ToGPU()
    for x, y in loader:
        x, y = to_gpu((x, y))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    main()
''',
            warnings=("ACC001:7",),
        ),
        Example(
            before='''\
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset


def train_step(model, optimizer, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        print(train_step(model, optimizer, x, y))


if __name__ == "__main__":
    if "--smoke-test" in sys.argv:
        tiny = torch.nn.Linear(16, 1)
        train_step(tiny, torch.optim.SGD(tiny.parameters(), lr=0.1), torch.randn(2, 16), torch.randn(2, 1))
    else:
        main()
''',
            after='''\
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def train_step(model, optimizer, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main():
    accelerator = Accelerator(cpu=True)
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        accelerator.print(train_step(model, optimizer, x, y))
    accelerator.end_training()


if __name__ == "__main__":
    if "--smoke-test" in sys.argv:
        tiny = torch.nn.Linear(16, 1)
        train_step(tiny, torch.optim.SGD(tiny.parameters(), lr=0.1), torch.randn(2, 16), torch.randn(2, 1))
    else:
        main()
''',
            warnings=("ACC009:9",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if ctx.accelerating:
            self._without_accelerator(ctx)
        for scope in ctx.readers():  # a rank test or collective rewritten through an accelerator threading could not bring
            if scope.kind == "function" and ctx.accelerator_in(scope) is None:
                ctx.abort(codes.NO_ACCELERATOR_HERE, scope.node, name=scope.name)
        found = ctx.plan.distributed
        if found and ctx.accelerating:  # never half-distributed: every piece of the hand-written set-up was taken
            for site in [*found.setup, *found.wrappers, *found.samplers, *found.spawns, *found.barriers, *found.reductions, *found.queries]:
                if not ctx.rewritten(site.node) and not any(s in ctx.edits.removed for s in ctx.facts.chain(site.stmt)):
                    ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func),
                              fix="convert it by hand (the accelerator prepares the model and the loaders, and has the collectives)")
        for site in ctx.facts.calls:
            if ctx.rewritten(site.node) or ctx.reported(site.node) or ctx.is_skipped(site.stmt):
                continue
            if site.method == "cuda" and not site.node.args:
                ctx.warn(codes.UNKNOWN_CUDA, site.node)
            elif site.method == "to" and site.node.args and site.node.args[0].keyword is None:
                value = site.node.args[0].value
                if ctx.dropped(value) or not _looks_like_device(value) or own_device(ctx.plan, site.scope, value):
                    continue  # ``.to(x.device)`` of a tensor ``x`` follows it wherever it is
                found = ctx.plan.origin(site.scope, value)
                if found is not None and found.role == "device" and ctx.accelerating:
                    continue
                if ctx.accelerating and dotted(value) in ctx.plan.distributed.device_indexes:
                    continue  # the device hand-written DDP set up: now the accelerator's (``str(accelerator.device)``)
                if ctx.accelerating and _tied_through_self(ctx, site.scope, value):
                    continue  # a trainer's ``self.args.device``: the ``args.device`` now ``accelerator.device``
                if ctx.accelerating and _model_state_device(ctx, site, value):
                    continue  # ``.to(net.device)`` of a model whose own ``self.device`` is ``PartialState().device``
                if ctx.accelerating and isinstance(value, cst.Subscript) and _entry_tied(ctx):
                    continue  # ``.to(params["device"])`` where the dict's device entry is now the process's
                if ctx.accelerating and _bound_to_entry(site.scope, value) and _entry_tied(ctx):
                    continue  # ``device = config["device"]``, then ``.to(device)`` (set W's W4): the same entry
                ctx.warn(codes.UNKNOWN_TO_DEVICE, site.node, device=code_of(value))

    @staticmethod
    def _without_accelerator(ctx: Context) -> None:
        """ACC009 at each backward, clipping and ``torch.save`` in a scope the accelerator does not reach (but a save
        kept to the main process through ``PartialState`` by the save rule, or in a function nothing runs)."""
        keeps_save = ctx.plan.distributed.keeps_save
        for site in ctx.facts.calls:
            scope = site.scope
            if ctx.accelerator_in(scope) is not None:
                continue
            if site.method == "backward" and scope.kind == "function":
                if ctx.facts.looped(site) and not ctx.plan.bystander(scope):
                    # the training loop itself out of the accelerator's reach (a trainer
                    # class's epoch method in a package): converting around it would leave it half-converted
                    ctx.abort(codes.NO_ACCELERATOR_HERE, site.node, name=scope.name)
                ctx.warn(codes.NO_ACCELERATOR_HERE, site.node, name=scope.name)  # the function that needs it
            elif site.method == "backward" and tensor_backward(site.node, scope.imports):
                if not ctx.plan.demo_backward(site):  # an autograd demo on a toy tensor needs no accelerator
                    ctx.warn(codes.NO_ACCELERATOR_HERE, site.node, name="backward")
            elif site.qualname in CLIPPING:
                ctx.warn(codes.NO_ACCELERATOR_HERE, site.node, name=site.qualname.rsplit(".", 1)[-1])
            elif site.qualname == "torch.save" and scope.kind == "function" and not keeps_save(ctx.facts, site) \
                    and not _run_on_main_at_calls(ctx, scope) and not ctx.plan.never_run(scope) \
                    and not any(ctx.rewritten(s) for s in ctx.facts.chain(site.stmt)):
                ctx.warn(codes.NO_ACCELERATOR_HERE, site.node, name="torch.save")


def _run_on_main_at_calls(ctx: Context, function: Scope) -> bool:
    """Whether every call of ``function`` is a statement another rule rewrote (``model.save_model(path)`` kept to
    the main process by the save rule): the save in it is taken care of there."""
    calls = ctx.plan.call_sites(function)
    return bool(calls) and all(ctx.rewritten(call.stmt) for call in calls)


def _model_state_device(ctx: Context, site: CallSite, value: cst.BaseExpression) -> bool:
    """``.to(net.device)``, or ``.to(device)`` after ``device = net.device`` (or handed it by every call), where
    ``net`` is a model and every model class of the program that sets its own ``self.device`` was tied to the
    runtime's process state by the device rule (``self.device = PartialState().device``: the accelerator's)."""
    own = [b for b in ctx.plan.bindings_with_role("device") if b.key == "self.device" and b.where.class_scope is not None
           and is_module_scope(b.where.class_scope, ctx.facts.classes)]
    if not own or not all(b.value is not None and ctx.rewritten(b.value) for b in own):
        return False
    return _model_device(ctx, site.scope, site.stmt, value, 3)


def _model_device(ctx: Context, scope: Scope, stmt: cst.BaseStatement, value: cst.BaseExpression, depth: int) -> bool:
    """Whether ``value`` is ``net.device`` of a model ``net``, through names bound to it and parameters handed it."""
    if isinstance(value, cst.Attribute) and value.attr.value == "device":
        owner = ctx.plan.origin(scope, value.value)
        return ctx.plan.prepared_model(scope, value.value, stmt) is not None or (owner is not None and owner.role == "model")
    if not isinstance(value, cst.Name) or depth == 0:
        return False
    binding = ctx.facts.last_binding_before(scope, value.value, stmt)
    if binding is not None:
        return binding.value is not None and _model_device(ctx, binding.where, binding.stmt, binding.value, depth - 1)
    if value.value not in scope.param_names:
        return False
    calls = ctx.plan.call_sites(scope)
    args = [ctx.plan.arg_for(call, scope, value.value) for call in calls]
    return bool(calls) and all(arg is not None and _model_device(ctx, call.scope, call.stmt, arg.value, depth - 1)
                               for call, arg in zip(calls, args))


def _bound_to_entry(scope: Scope, value: cst.BaseExpression) -> bool:
    """``device`` bound once in ``scope``, to a dict's device entry (``device = config["device"]``)."""
    bindings = scope.bindings.get(value.value, []) if isinstance(value, cst.Name) else []
    return len(bindings) == 1 and isinstance(bindings[0].value, cst.Subscript) and _looks_like_device(bindings[0].value)


def _entry_tied(ctx: Context) -> bool:
    """Whether the program's device kept in a dict (``"device": torch.device(...)``) was made the process's own."""
    entries = ctx.plan.analysis(device_entries)
    return bool(entries) and all(ctx.rewritten(e.value) for e in entries)


def _looks_like_device(value: cst.BaseExpression) -> bool:
    """``device``, ``args.device``, ``gpu``; and ``params["device"]``, a device kept in a dict (O2's DCGAN trainer:
    ``params.update({"device": torch.device("cuda:0" ...)})``, every process's batches then sent to GPU 0)."""
    if isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Index):
        key = value.slice[0].slice.value
        return isinstance(key, cst.SimpleString) and "device" in str(key.evaluated_value).lower()
    if isinstance(value, cst.Attribute):
        value = value.attr
    return isinstance(value, cst.Name) and ("device" in value.value.lower() or value.value in ("dev", "gpu"))


def _tied_through_self(ctx: Context, scope: Scope, value: cst.BaseExpression) -> bool:
    """``self.args.device`` in a trainer whose ``self.args`` is the ``args`` its construction passes, where
    ``args.device = ...`` was tied to ``accelerator.device`` (the device rule follows the same path)."""
    if not (dotted(value) or "").startswith("self."):
        return False
    for binding in ctx.plan.bindings_with_role("device"):
        if "." in binding.key and binding.value is not None and ctx.rewritten(binding.value):
            if dotted(seen_from(ctx.plan, binding.where, scope, value)) == binding.key:
                return True
    return False
