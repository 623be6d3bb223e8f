"""GatherForMetrics: in an evaluation loop over a prepared loader, gather the predictions and the
targets from every process right after the forward pass, so sums and ``len(loader.dataset)`` stay right.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.collect import target_names
from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.engine.rule import Example, Rule


class GatherForMetrics(Rule):
    name = "evaluation"
    description = "Gather predictions and targets across processes in evaluation loops."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
correct = 0
with torch.no_grad():
    for x, y in loader:
        output = model(x)
        correct += (output.round() == y.round()).sum().item()
print(correct / len(loader.dataset))
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
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
correct = 0
with torch.no_grad():
    for x, y in loader:
        output = model(x)
        output, y = accelerator.gather_for_metrics((output, y))
        correct += (output.round() == y.round()).sum().item()
accelerator.print(correct / len(loader.dataset))
accelerator.end_training()
''',
        ),
        Example(
            # the forward alone under no_grad, its output an object: gather what is derived from ``outputs.logits``
            before='''\
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, labels):
        logits = self.fc(x)
        return SimpleNamespace(logits=logits, loss=torch.nn.functional.cross_entropy(logits, labels))


loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    model(x, y).loss.backward()
    optimizer.step()
hits = []
for x, y in loader:
    with torch.no_grad():
        outputs = model(x, y)
    preds = outputs.logits.argmax(dim=-1)
    hits.append(preds == y)
print(torch.cat(hits).float().mean().item())
''',
            after='''\
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, labels):
        logits = self.fc(x)
        return SimpleNamespace(logits=logits, loss=torch.nn.functional.cross_entropy(logits, labels))


loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    accelerator.backward(model(x, y).loss)
    optimizer.step()
hits = []
for x, y in loader:
    with torch.no_grad():
        outputs = model(x, y)
    preds = outputs.logits.argmax(dim=-1)
    preds, y = accelerator.gather_for_metrics((preds, y))
    hits.append(preds == y)
accelerator.print(torch.cat(hits).float().mean().item())
accelerator.end_training()
''',
        ),
        Example(
            # an output object read only inside a larger expression: nothing to gather, the metric stays local
            before='''\
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, labels):
        logits = self.fc(x)
        return SimpleNamespace(logits=logits, loss=torch.nn.functional.cross_entropy(logits, labels))


loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    model(x, y).loss.backward()
    optimizer.step()
hits = []
for x, y in loader:
    with torch.no_grad():
        outputs = model(x, y)
    hits.append(outputs.logits.argmax(dim=-1) == y)
print(torch.cat(hits).float().mean().item())
''',
            after='''\
from types import SimpleNamespace

import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, labels):
        logits = self.fc(x)
        return SimpleNamespace(logits=logits, loss=torch.nn.functional.cross_entropy(logits, labels))


loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    accelerator.backward(model(x, y).loss)
    optimizer.step()
hits = []
for x, y in loader:
    with torch.no_grad():
        outputs = model(x, y)
    hits.append(outputs.logits.argmax(dim=-1) == y)
accelerator.print(torch.cat(hits).float().mean().item())
accelerator.end_training()
''',
            warnings=("ACC016:26",),
        ),
        Example(
            # the batch unpacked inside the loop; ``outputs.data`` is an attribute, not the batch ``data``
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
correct = total = 0
with torch.no_grad():
    for data in loader:
        images, labels = data[0], data[1]
        outputs = model(images)
        _, predicted = torch.max(outputs.data, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()
print(correct / total)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=4)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
    optimizer.step()
correct = total = 0
with torch.no_grad():
    for data in loader:
        images, labels = data[0], data[1]
        outputs = model(images)
        outputs, labels = accelerator.gather_for_metrics((outputs, labels))
        _, predicted = torch.max(outputs.data, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()
accelerator.print(correct / total)
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    output = model(x)
    torch.nn.functional.mse_loss(output, y).backward()
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
    output = model(x)
    accelerator.backward(torch.nn.functional.mse_loss(output, y))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        self._warn_model_methods(ctx)
        for loop in ctx.facts.loops:
            accelerator = ctx.accelerator_in(loop.scope)
            body = loop.node.body
            if accelerator is None or not isinstance(body, cst.IndentedBlock) or not _is_evaluation(ctx, loop):
                continue
            for index, stmt in enumerate(body.body):
                call = _model_call(ctx, loop, stmt)
                if call is None:
                    continue
                rest = list(body.body[index + 1 :])
                while isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock):
                    # `with torch.autocast(...): logits = model(x)`: gather inside the with, right after
                    inner = next((s for s in stmt.body.body if _model_call(ctx, loop, s) is not None), None)
                    if inner is None:
                        break
                    rest = [*stmt.body.body[list(stmt.body.body).index(inner) + 1 :], *rest]
                    stmt = inner
                if ctx.is_skipped(stmt):
                    break
                named = _named_output(stmt, call)
                if named is not None and len(named) == 1 and _read_through_attributes(named[0], rest):
                    # ``outputs = model(**batch)`` read only as ``outputs.logits``: an object gather cannot
                    # split into rows; gather what the loop derives from it (``preds = outputs.logits.argmax(-1)``)
                    derived = _derivation(named[0], rest)
                    if derived is None or ctx.is_skipped(derived[0]):
                        ctx.warn(codes.LOCAL_METRIC, call)
                        break
                    stmt, named, call = derived
                    rest = rest[rest.index(stmt) + 1 :]
                if named is not None:
                    gather = _gather(ctx, loop, named, _inputs(call), _names_used(rest), accelerator)
                    ctx.insert_after(stmt, [gather])
                elif _extractable(stmt):
                    name = _fresh_name(loop, "output")
                    # names read after the forward: in the later statements, and in this one outside the call
                    later = _names_used(rest) | (_names_used([stmt]) - (_inputs(call) - _names_outside(stmt, call)))
                    gather = _gather(ctx, loop, [name], _inputs(call), later, accelerator)
                    ctx.insert_before(stmt, [f"{name} = {code_of(call)}", gather])
                    ctx.replace(call, stmt, lambda _, n=name: cst.Name(n))  # type: ignore[misc]
                else:
                    ctx.warn(codes.LOCAL_METRIC, call)
                    break
                ctx.change("gather predictions and targets for metrics")
                break

    @staticmethod
    def _warn_model_methods(ctx: Context) -> None:
        """``acc = model.accuracy(val_loader)``: a method of the model that walks a prepared loader evaluates
        each process's shard, out of the accelerator's reach: its metric stays local (ACC016)."""
        walking = {
            s.name for s in ctx.facts.scopes
            if s.kind == "function" and s.parent is not None and s.parent.kind == "class" and s.loops
        }
        for site in ctx.facts.calls:
            if site.method not in walking or not isinstance(site.node.func, cst.Attribute):
                continue
            if not _is_model(ctx, site.scope, site.node.func.value, site.stmt):
                continue
            for arg in site.node.args:
                found = ctx.plan.prepared(site.scope, arg.value, site.stmt)
                if found is not None and found.role == "loader":
                    ctx.warn(codes.LOCAL_METRIC, site.node)
                    break


def _is_evaluation(ctx: Context, loop: Loop) -> bool:
    """A loop over a prepared loader that runs a prepared model and never calls backward: under
    ``no_grad``/``inference_mode``, with only its forward under one (``with torch.no_grad(): outputs =
    model(**batch)``), or with neither in a function that put the model in ``eval()`` mode and takes no
    gradient or optimizer step in the loop."""
    if ctx.plan.loader_of(loop) is None or any(ctx.plan.reaches_backward(site) for site in loop.calls):
        return False
    forwards = [site for site in loop.calls if _is_model(ctx, loop.scope, site.node.func, site.stmt)]
    if loop.no_grad or any(site.no_grad for site in forwards):
        return True
    if not forwards or any(site.method == "step" or site.qualname == "torch.autograd.grad" for site in loop.calls):
        return False
    return any(
        site.method == "eval" and _is_model(ctx, loop.scope, site.node.func.value, site.stmt)  # type: ignore[attr-defined]
        for site in loop.scope.calls
    )


def _is_model(ctx: Context, scope: Scope, node: cst.BaseExpression, stmt: cst.BaseStatement) -> bool:
    """Whether ``node`` holds a prepared model in ``scope`` at ``stmt``."""
    return ctx.plan.prepared_model(scope, node, stmt) is not None


def _model_call(ctx: Context, loop: Loop, stmt: cst.BaseStatement) -> cst.Call | None:
    """The first call of a prepared model in ``stmt`` (the forward pass), or None."""
    first, last = ctx.facts.order[stmt]
    for site in loop.calls:
        if site.stmt in ctx.facts.order and first <= ctx.facts.order[site.stmt][0] <= last:
            if _is_model(ctx, loop.scope, site.node.func, site.stmt):
                return site.node
    return None


# Tensor methods that keep one row per sample: gathering their result gathers the predictions.
_PER_SAMPLE = {"argmax", "argmin", "softmax", "log_softmax", "sigmoid", "exp", "float", "double", "detach", "cpu", "round"}


def _named_output(stmt: cst.BaseStatement, call: cst.Call) -> list[str] | None:
    """``out = model(x)``, ``pred = model(x).argmax(1)`` or ``recon, mu, logvar = model(x)``: the names
    that hold one row per sample."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if isinstance(target, cst.Tuple) and assign.value is call and all(isinstance(e.value, cst.Name) for e in target.elements):
        return [e.value.value for e in target.elements]  # type: ignore[attr-defined]
    if not isinstance(target, cst.Name):
        return None
    value = assign.value
    while value is not call:
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
            return None
        method = value.func.attr.value
        if method not in _PER_SAMPLE or _reduces_batch(value):
            return None
        value = value.func.value
    return [target.value]


def _reduces_batch(call: cst.Call) -> bool:
    """``x.argmax()`` (over everything) or ``x.softmax(0)``: a result that is no longer one row per sample."""
    if call.func.attr.value in ("argmax", "argmin", "softmax", "log_softmax") and not call.args:  # type: ignore[attr-defined]
        return call.func.attr.value in ("argmax", "argmin")  # type: ignore[attr-defined]
    for arg in call.args:
        if (arg.keyword is None or arg.keyword.value == "dim") and isinstance(arg.value, cst.Integer):
            return arg.value.evaluated_value == 0
        if arg.keyword is None or arg.keyword.value == "dim":
            return not isinstance(arg.value, cst.UnaryOperation)  # dim=-1 style is per sample; other shapes: unknown
    return False


def _read_through_attributes(name: str, stmts: Sequence[cst.BaseStatement]) -> bool:
    """``name`` is read in ``stmts``, and only as ``name.attr`` (a model output object such as
    ``outputs.logits``), never whole, indexed or rebound."""
    reads = [n for stmt in stmts for n in m.findall(stmt, m.Name(name)) if isinstance(n, cst.Name)]
    if not reads:
        return False
    called = {id(c.func) for stmt in stmts for c in m.findall(stmt, m.Call(func=m.Attribute()))}  # type: ignore[union-attr]
    through = {
        id(a.value)  # type: ignore[union-attr]
        for stmt in stmts
        for a in m.findall(stmt, m.Attribute(value=m.Name(name)))
        if id(a) not in called and a.attr.value not in _TENSOR_ATTRIBUTES  # type: ignore[union-attr]
    }
    return all(id(n) in through for n in reads)


# Attributes of a tensor (``outputs.data``): a name read through them holds a tensor, not an output object.
_TENSOR_ATTRIBUTES = {"data", "shape", "dtype", "device", "T", "mT", "grad", "real", "imag", "ndim", "is_cuda"}


def _derivation(
    name: str, stmts: Sequence[cst.BaseStatement]
) -> tuple[cst.BaseStatement, list[str], cst.BaseExpression] | None:
    """The first ``preds = name.logits.argmax(dim=-1)`` (an attribute of the output, through methods that keep
    one row per sample) among ``stmts``, with the name it binds and its value."""
    for stmt in stmts:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            continue
        value = assign.value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value not in _PER_SAMPLE or _reduces_batch(value):
                break
            value = value.func.value
        if isinstance(value, cst.Attribute) and m.matches(value.value, m.Name(name)):
            return stmt, [assign.targets[0].target.value], assign.value
    return None


def _extractable(stmt: cst.BaseStatement) -> bool:
    """A simple statement the forward can be taken out of (``loss += f(model(x), y).item()``)."""
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(
        stmt.body[0], (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr)
    )


def _inputs(call: cst.Call) -> set[str]:
    return {n.value for n in m.findall(call, m.Name()) if isinstance(n, cst.Name)}


def _fresh_name(loop: Loop, base: str) -> str:
    """``output``, or ``output_`` ... when the function already uses that name."""
    used = set(loop.scope.refs) | set(loop.scope.bindings) | set(loop.scope.param_names)
    name = base
    while name in used:
        name += "_"
    return name


def _gather(ctx: Context, loop: Loop, outputs: list[str], inputs: set[str], later: set[str], accelerator: str) -> str:
    """``output, target = accelerator.gather_for_metrics((output, target))``, gathering the outputs, then the batch
    names used after the forward (targets first, then inputs used again). The agreement reads what it makes global
    from this statement."""
    # a state the forward returns and takes back (an RNN's hidden state: ``out, h = net(x, h)``) stays this
    # process's own: gathered, it would come back with every process's rows
    outputs = [o for o in outputs if o not in inputs] or outputs
    batch = ctx.plan.batch_names(loop)
    ordered = target_names(loop.node.target)
    for stmt in loop.stmts:  # then the parts unpacked from the batch (``images, labels = data``), in order
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    ordered += [n for t in small.targets for n in target_names(t.target) if n in batch]
    used = [name for name in dict.fromkeys(ordered) if name in batch and name in later and name not in outputs]
    gathered = outputs + [n for n in used if n not in inputs] + [n for n in used if n in inputs]
    if len(gathered) == 1:
        return f"{gathered[0]} = {accelerator}.gather_for_metrics({gathered[0]})"
    names = ", ".join(gathered)
    return f"{names} = {accelerator}.gather_for_metrics(({names}))"


def _names_outside(stmt: cst.BaseStatement, call: cst.Call) -> set[str]:
    """Names ``stmt`` uses outside ``call``."""
    inside = {id(n) for n in m.findall(call, m.Name())}
    return {n.value for n in m.findall(stmt, m.Name()) if isinstance(n, cst.Name) and id(n) not in inside}


def _names_used(stmts: Sequence[cst.BaseStatement]) -> set[str]:
    """The variables ``stmts`` read or bind: not attribute names (``outputs.data``) nor keywords (``dim=1``)."""
    names: set[str] = set()
    for stmt in stmts:
        skip = {id(n.attr) for n in m.findall(stmt, m.Attribute())}  # type: ignore[union-attr]
        skip |= {id(a.keyword) for a in m.findall(stmt, m.Arg()) if a.keyword is not None}  # type: ignore[union-attr]
        names |= {n.value for n in m.findall(stmt, m.Name()) if isinstance(n, cst.Name) and id(n) not in skip}
    return names
