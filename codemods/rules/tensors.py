"""PlaceTensors: other tensors and modules sent to the GPU by hand go to ``accelerator.device``.

``device="cuda"`` passed to a function that is not torch's (``log(msg, device="cuda")``) stays, with
ACC015: the string may be printed or compared. Random factories keep ``.to(...)``: drawing on the GPU would use another random stream than the
original, which drew on the CPU and then moved the values.

A tensor the script makes on the CPU and never places, read by a prepared model outside a prepared loader's
batches (``X = torch.arange(0, 1, 0.02).unsqueeze(1)``; ``model(X)``; ``for x in torch.ones(4, 2): model(x)``),
would meet the model on another device on a GPU machine (the accelerator is not pinned to the CPU in a program
that names a device): it is moved to ``accelerator.device`` where it is made, when every read of it (and of what
is computed from it) takes a tensor on any device (analysis/unplaced.py, analysis/reads.py); otherwise (a plot, a
default argument, ``.numpy()`` read it) ACC043 names it.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.edits import is_pure
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.file_writes import called_after_accelerator
from accelify.codemods.analysis.names import ImportMap, dotted
from accelify.codemods.analysis.placed import placeable_teacher, unprepared_model
from accelify.codemods.analysis.roles import is_cuda_string, is_module_class
from accelify.codemods.analysis.unplaced import unplaced_inputs
from accelify.codemods.engine.rule import Example, Rule

DETERMINISTIC_FACTORIES = {
    f"torch.{name}"
    for name in ("zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor", "as_tensor")
}


class PlaceTensors(Rule):
    name = "tensors"
    description = "Send other tensors to accelerator.device instead of CUDA."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
mask = torch.ones(2).cuda()
noise = torch.randn(2).cuda()
zeros = torch.zeros(2, device="cuda")
for x in torch.ones(4, 2):
    model(x * mask + noise + zeros).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
mask = torch.ones(2, device=accelerator.device)
noise = torch.randn(2).to(accelerator.device)
if accelerator.process_index > 0:
    torch.manual_seed(accelerator.process_index)
zeros = torch.zeros(2, device=accelerator.device)
for x in torch.ones(4, 2, device=accelerator.device):
    accelerator.backward(model(x * mask + noise + zeros).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
def log(message, device="cuda"):
    return message
log("start", device="cuda")
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
def log(message, device="cuda"):
    return message
log("start", device="cuda")
for x in torch.ones(4, 2, device=accelerator.device):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            warnings=('ACC015:6',),
        ),
        Example(
            before='''\
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
mask = torch.ones(2, device=device)
for x in torch.ones(4, 2, device=device):
    model(x * mask).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
device = accelerator.device
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
mask = torch.ones(2, device=device)
for x in torch.ones(4, 2, device=device):
    accelerator.backward(model(x * mask).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
            warnings=("ACC022:6",),
        ),
        Example(
            before='''\
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
X = torch.arange(0, 1, 0.1).unsqueeze(1)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    loss = model(X).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(X.numpy().mean())
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
X = torch.arange(0, 1, 0.1).unsqueeze(1)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for epoch in range(3):
    loss = model(X).pow(2).mean()
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
accelerator.print(X.numpy().mean())
accelerator.end_training()
''',
            warnings=("ACC043:3",),  # X feeds the model and `.numpy()`: moving it would break the second read
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=8)
model = torch.nn.Linear(16, 4).cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 2.0, 4.0]).cuda(0))
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,))), batch_size=8)
model = torch.nn.Linear(16, 4)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
criterion = torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 2.0, 4.0]).cuda(0))
for x, y in loader:
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC013:7",),
        ),
        Example(
            # ``.cuda()`` in a helper the accelerator does not reach, every call of which runs once it exists: the
            # runtime's process state, whose device is the accelerator's
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def to_gpu(batch):
    return [t.cuda() for t in batch]


def main():
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Linear(8, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
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
from accelify.runtime import PartialState


def to_gpu(batch):
    return [t.to(PartialState().device) for t in batch]


def main():
    accelerator = Accelerator()
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
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
        ),
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if ctx.rewritten(site.node) or ctx.reported(site.node):
                continue
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None and site.method == "cuda" and _helper_after_accelerator(ctx, site):
                # ``item = batch["item"].long().cuda()`` in an evaluation helper of another module the accelerator is
                # not threaded into (set U's U2's ``metrics``), every call of which runs once it exists: the
                # runtime's process state, whose device is the accelerator's
                self._cuda(ctx, site, expression("PartialState().device"))
                ctx.import_state(site.scope.unit)
                continue
            if accelerator is None or not ctx.after_accelerator(site.scope, site.stmt):
                continue
            device = expression(f"{accelerator}.device")
            if site.method == "cuda":
                self._cuda(ctx, site, device)
            elif site.method == "to" and _cuda_target(ctx, site):
                if ctx.replace(site.node, site.stmt, lambda c, d=device: _set_first_arg(c, d)):  # type: ignore[misc]
                    ctx.change("send other tensors to accelerator.device")
            else:
                for arg in site.node.args:
                    if arg.keyword is None or arg.keyword.value != "device" or not is_cuda_string(arg.value):
                        continue
                    if not _places_tensors(ctx, site):
                        ctx.warn(codes.CUDA_KEYWORD, arg, name=code_of(site.node.func))
                    elif ctx.replace(arg, site.stmt, lambda a, d=device: a.with_changes(value=d)):  # type: ignore[misc,attr-defined]
                        ctx.change("send other tensors to accelerator.device")

        self._unplaced(ctx)
        self._teachers(ctx)

    def _teachers(self, ctx: Context) -> None:
        """A distillation teacher (a model ``prepare`` does not receive, run on a prepared loader's batches) in a
        program that never chooses a device: placed where it is made, ``teacher = Net().to(accelerator.device)``,
        which is what lets the accelerator choose the machine's device (``analysis/placed.py``) instead of being
        pinned to the CPU."""
        creation = ctx.plan.analysis(Creation)
        if ctx.plan.prepare_scope is None or not creation.unplaced_program or "cpu=True" in creation.arguments:
            return  # (a program that names a device places its models itself)
        done: set[int] = set()
        for site in ctx.facts.calls:
            found = unprepared_model(ctx.plan, site)
            if found is None or id(found) in done:
                continue
            value = placeable_teacher(ctx.plan, found)
            accelerator = ctx.accelerator_in(found.where)
            if value is None or accelerator is None or not ctx.after_accelerator(found.where, found.stmt) \
                    or ctx.rewritten(value):
                continue
            done.add(id(found))
            device = expression(f"{accelerator}.device")
            if ctx.replace(value, found.stmt, lambda c, d=device: _moved(c, d)):  # type: ignore[misc]
                ctx.change("send the teacher model to accelerator.device")

    def _unplaced(self, ctx: Context) -> None:
        """ACC043 for each CPU tensor a prepared model reads outside a prepared loader's batches, unless the
        accelerator is pinned to the CPU (``cpu=True``: the model stays with them, as in the original)."""
        if ctx.plan.prepare_scope is None or "cpu=True" in ctx.plan.analysis(Creation).arguments:
            return
        for found in unplaced_inputs(ctx.plan):
            accelerator = ctx.accelerator_in(found.scope)
            if (
                found.placeable and accelerator is not None and ctx.after_accelerator(found.scope, found.stmt)
                and not ctx.rewritten(found.made)
            ):
                device = expression(f"{accelerator}.device")
                if ctx.replace(found.made, found.stmt, lambda c, d=device, i=found.scope.imports: _placed(i, c, d)):  # type: ignore[misc]
                    ctx.change("send the CPU tensors a prepared model reads to accelerator.device")
                    continue
            ctx.warn(codes.UNPLACED_INPUT, found.made, name=found.name, reader=code_of(found.reader))

    def _cuda(self, ctx: Context, site: CallSite, device: cst.BaseExpression) -> None:
        call = site.node
        positional = [a for a in call.args if a.keyword is None]
        if positional:
            ctx.warn(codes.CUDA_INDEX, call, index=code_of(positional[0].value))
            return
        receiver = call.func.value  # type: ignore[attr-defined]
        inner = ctx.facts.sites.get(receiver) if isinstance(receiver, cst.Call) else None
        if inner is not None and inner.qualname in DETERMINISTIC_FACTORIES and not call.args and not _has_device(receiver):
            ctx.replace(call, site.stmt, lambda c, d=device: _device_kwarg(c, d))  # type: ignore[misc]
        else:
            ctx.replace(call, site.stmt, lambda c, d=device: _to(c, d))  # type: ignore[misc]
        ctx.change("send other tensors to accelerator.device")
        guard = ctx.facts.parent_stmt.get(site.stmt)
        if _only_placement_guard(guard, site.stmt) and ctx.replace(guard, guard, _unguard):  # type: ignore[arg-type]
            # `if use_cuda: x = x.cuda()`: the models are on accelerator.device whatever the flag, so x goes there too
            ctx.change("send other tensors to accelerator.device")


def _helper_after_accelerator(ctx: Context, site: CallSite) -> bool:
    """``x.cuda()`` with no index, in a module-level function of the program that the accelerator does not reach and
    every call of which runs after it exists (``analysis/file_writes.py``)."""
    scope = site.scope
    return ctx.accelerating and not site.node.args and scope.kind == "function" and scope.class_scope is None \
        and not ctx.plan.bystander(scope) and not ctx.plan.never_run(scope) \
        and called_after_accelerator(ctx, ctx.plan, scope)


def _only_placement_guard(guard: cst.BaseStatement | None, stmt: cst.BaseStatement) -> bool:
    """``if <flag>: x = x.cuda()`` (no else, a test without side effects, that one statement)."""
    return (
        isinstance(guard, cst.If)
        and guard.orelse is None
        and isinstance(guard.body, cst.IndentedBlock)
        and list(guard.body.body) == [stmt]
        and is_pure(guard.test)
        and isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Assign)
    )


def _unguard(node: cst.CSTNode) -> cst.CSTNode:
    if not (isinstance(node, cst.If) and isinstance(node.body, cst.IndentedBlock)):
        return node  # unguarded already: both ``inputs.cuda(), targets.cuda()`` of one guarded line ask for it
    inner = node.body.body[0]
    return inner.with_changes(leading_lines=[*node.leading_lines, *inner.leading_lines])


def _places_tensors(ctx: Context, site: CallSite) -> bool:
    """Whether ``device=`` of this call places tensors: a torch function or class, a method of an
    object that is no imported module (``x.new_zeros``), or an ``nn.Module`` class of this file.
    ``log("done", device="cuda")`` is none of these: the string may be compared or printed."""
    q = site.qualname or ""
    if q.startswith("torch.") or is_module_class(q, ctx.facts.classes):
        return True
    receiver = site.node.func.value if isinstance(site.node.func, cst.Attribute) else None
    head = (dotted(receiver) or "").split(".")[0] if receiver is not None else None
    return receiver is not None and head not in site.scope.imports.aliases


def _cuda_target(ctx: Context, site: CallSite) -> bool:
    args = site.node.args
    if not args or args[0].keyword is not None:
        return False
    value = args[0].value
    if is_cuda_string(value):
        return True
    return (
        isinstance(value, cst.Call)
        and site.scope.imports.qualname(value.func) == "torch.device"
        and bool(value.args)
        and is_cuda_string(value.args[0].value)
    )


def _placed(imports: ImportMap, made: cst.CSTNode, device: cst.BaseExpression) -> cst.CSTNode:
    """``torch.ones(4, 2)`` -> ``torch.ones(4, 2, device=...)``; anything else (a random factory, which keeps
    the original's random stream, or ``torch.arange(...).unsqueeze(1)``) -> ``(...).to(...)``."""
    assert isinstance(made, cst.Call)
    if imports.qualname(made.func) in DETERMINISTIC_FACTORIES:
        keyword = cst.Arg(device, keyword=cst.Name("device"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return made.with_changes(args=[*made.args, keyword])
    return _moved(made, device)


def _moved(made: cst.CSTNode, device: cst.BaseExpression) -> cst.Call:
    """``(made).to(device)``."""
    return cst.Call(func=cst.Attribute(value=made, attr=cst.Name("to")), args=[cst.Arg(device)])  # type: ignore[arg-type]


def _has_device(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "device" for a in call.args)


def _set_first_arg(call: cst.CSTNode, device: cst.BaseExpression) -> cst.CSTNode:
    assert isinstance(call, cst.Call)
    return call.with_changes(args=[call.args[0].with_changes(value=device), *call.args[1:]])


def _to(call: cst.CSTNode, device: cst.BaseExpression) -> cst.CSTNode:
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    return call.with_changes(
        func=call.func.with_changes(attr=cst.Name("to")),
        args=[cst.Arg(device), *call.args],
    )


def _device_kwarg(call: cst.CSTNode, device: cst.BaseExpression) -> cst.CSTNode:
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    factory = call.func.value
    assert isinstance(factory, cst.Call)
    keyword = cst.Arg(device, keyword=cst.Name("device"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    return factory.with_changes(args=[*factory.args, keyword], lpar=call.lpar, rpar=call.rpar)
