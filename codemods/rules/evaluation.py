"""GatherForMetrics: in an evaluation loop over a prepared loader, gather the predictions and the
targets from every process right after the forward pass, so sums and ``len(loader.dataset)`` stay right.
Where the loop computes the program's own loss from them (a loss that may depend on which samples share a batch:
``analysis/program_losses.py``), the loss runs on this process's batch and the gather goes after it.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.evaluation_loops import is_evaluation, is_model, model_call, model_calls
from accelify.codemods.analysis.model_outputs import (
    call_inputs,
    comprehension_output,
    derivation,
    extractable,
    gathered_names,
    in_own_scope,
    named_output,
    names_outside,
    optional_names,
    names_used,
    read_through_attributes,
)
from accelify.codemods.analysis.program_losses import local_loss
from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.reduced_outputs import feeds_reduced_sums_only
from accelify.codemods.analysis.ungathered import REPORTED, counted_here
from accelify.codemods.analysis.roles import MODULE_API
from accelify.codemods.analysis.snippets import code_of, unwrap
from accelify.codemods.analysis.facts import Loop
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
        places: Agreement | None = None  # where a gather may go (``Agreement.collective_place``), built when first asked
        for loop in ctx.facts.loops:
            accelerator = ctx.accelerator_in(loop.scope)
            body = loop.node.body
            if accelerator is None or not isinstance(body, cst.IndentedBlock) or not is_evaluation(ctx.plan, loop):
                continue
            for index, stmt in enumerate(body.body):
                call = model_call(ctx.plan, ctx.facts, loop, stmt)
                if call is None:
                    continue
                rest = list(body.body[index + 1 :])
                while isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock):
                    # `with torch.autocast(...): logits = model(x)`: gather inside the with, right after
                    inner = next((s for s in stmt.body.body if model_call(ctx.plan, ctx.facts, loop, s) is not None), None)
                    if inner is None:
                        break
                    rest = [*stmt.body.body[list(stmt.body.body).index(inner) + 1 :], *rest]
                    stmt = inner
                if ctx.is_skipped(stmt):
                    break
                places = places or Agreement(ctx.facts, ctx.plan, ctx.edits)  # its own: ``ctx.agreement`` reads the gathers
                if places.collective_place(stmt, loop.scope) is None:
                    ctx.warn(codes.LOCAL_METRIC, call)  # a gather some processes skip would leave the others waiting
                    break
                named = named_output(stmt, call)
                if named is not None and len(named) == 1 and read_through_attributes(named[0], rest):
                    # ``outputs = model(**batch)`` read only as ``outputs.logits``: an object gather cannot
                    # split into rows; gather what the loop derives from it (``preds = outputs.logits.argmax(-1)``)
                    derived = derivation(named[0], rest)
                    if derived is None or ctx.is_skipped(derived[0]):
                        ctx.warn(codes.LOCAL_METRIC, call)
                        break
                    stmt, named, call = derived
                    rest = rest[rest.index(stmt) + 1 :]
                inputs = call_inputs(call)
                if named is None and in_own_scope(stmt, call):
                    # ``outputs = tuple(net(d) for d in data)``: the forward reads the comprehension's own names and
                    # cannot be taken out of it; gather the whole sequence it builds, or leave the metric (ACC016)
                    named = comprehension_output(stmt, call)
                    if named is None:
                        ctx.warn(codes.LOCAL_METRIC, call)
                        break
                    inputs = names_used([stmt]) - set(named)
                verdict = counted_here(ctx.plan, loop, stmt, named, rest) if named is not None else None
                if verdict is not None:  # no gather: reduced after the loop (``analysis/ungathered.py``), or reported
                    if verdict == REPORTED:
                        ctx.warn(codes.LOCAL_METRIC, call)
                    break
                # the program's own loss (a parameter, a class of its own: it may mine or normalise within the
                # batch) runs on this process's batch; what reads the outputs after it is gathered after it
                loss = local_loss(ctx.plan, loop, named or [], [stmt, *rest], None if named else call)
                if loss is not None:
                    anchor, after = [stmt, *rest][loss], [stmt, *rest][loss + 1 :]
                    if ctx.is_skipped(anchor) or places.collective_place(anchor, loop.scope) is None:
                        ctx.warn(codes.LOCAL_METRIC, call)
                        break
                    later = names_used(after)
                    if later & (set(named or []) | ctx.plan.batch_names(loop)):  # else nothing to gather
                        if named is None:  # the forward in the loss's call: taken out, to be gathered after it
                            named = [_fresh_name(loop, "output")]
                            ctx.insert_before(stmt, [f"{named[0]} = {code_of(_reachable(ctx, loop, call, stmt, accelerator))}"])
                            ctx.replace(call, stmt, lambda _, n=named[0]: cst.Name(n))  # type: ignore[misc]
                        ctx.insert_after(anchor, _gather(ctx, loop, named, inputs, later, accelerator, (anchor, True)))
                        ctx.change("gather predictions and targets for metrics after the program's own loss")
                    break  # the loss runs on this process's batch; its sums are reduced after the loop (averages)
                if named is not None:
                    ctx.insert_after(stmt, _gather(ctx, loop, named, inputs, names_used(rest), accelerator, (stmt, True)))
                elif _discarded(stmt, call):
                    break  # ``model(data)`` alone (P10's VAE keeps its loss on itself): no output to gather; what the
                    # model keeps is this process's, summed and reduced after the loop (rules/averages.py)
                elif extractable(stmt):
                    # every forward of the statement (``triplet_loss(model(a), model(p), model(n))``) taken out
                    calls = model_calls(ctx.plan, ctx.facts, loop, stmt) or [call]
                    names = _fresh_names(loop, "output", len(calls))
                    inputs = set().union(*(call_inputs(c) for c in calls))
                    outside = set.intersection(*(names_outside(stmt, c) for c in calls))
                    # names read after the forward: in the later statements, and in this one outside the calls
                    later = names_used(rest) | (names_used([stmt]) - (inputs - outside))
                    gather = _gather(ctx, loop, names, inputs, later, accelerator, (stmt, False))
                    taken = [f"{n} = {code_of(_reachable(ctx, loop, c, stmt, accelerator))}" for n, c in zip(names, calls)]
                    # (ungrouped: a group made of the statement, a loop per original batch the pass holds, starts after
                    # the gather)
                    ctx.insert_before(stmt, [*taken, *gather], ungrouped=True)
                    for n, c in zip(names, calls):
                        ctx.replace(c, stmt, lambda _, n=n: cst.Name(n))  # type: ignore[misc]
                elif not feeds_reduced_sums_only(ctx.plan, loop, stmt, rest):
                    ctx.warn(codes.LOCAL_METRIC, call)
                    break
                else:
                    break  # what it computes ends in running sums reduced after the loop (rules/averages.py)
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
            if not is_model(ctx.plan, site.scope, site.node.func.value, site.stmt):
                continue
            for arg in site.node.args:
                found = ctx.plan.prepared(site.scope, arg.value, site.stmt)
                if found is not None and found.role == "loader":
                    ctx.warn(codes.LOCAL_METRIC, site.node)
                    break


def _reachable(ctx: Context, loop: Loop, call: cst.Call, stmt: cst.BaseStatement, accelerator: str) -> cst.Call:
    """The forward as the new statement runs it: with ``--target accelerate`` a method of the model's own class
    (``model.get_embedding(x)``) through ``accelerator.unwrap_model(model)``, as the attributes rule writes it where
    the call stays in place (Hugging Face Accelerate's DDP wrapper does not have it)."""
    func = call.func
    if ctx.target != "accelerate" or not isinstance(func, cst.Attribute) or is_model(ctx.plan, loop.scope, func, stmt) \
            or func.attr.value in MODULE_API:
        return call
    return call.with_changes(func=func.with_changes(value=unwrap(func.value, accelerator)))


def _fresh_name(loop: Loop, base: str) -> str:
    """``output``, or ``output_`` ... when the function already uses that name."""
    return _fresh_names(loop, base, 1)[0]


def _fresh_names(loop: Loop, base: str, count: int) -> list[str]:
    """``count`` names the function does not use: ``output``, then ``output_2``, ``output_3`` ... (each with ``_``
    added while the function uses it)."""
    used = set(loop.scope.refs) | set(loop.scope.bindings) | set(loop.scope.param_names)
    names: list[str] = []
    for i in range(count):
        name = base if i == 0 else f"{base}_{i + 1}"
        while name in used or name in names:
            name += "_"
        names.append(name)
    return names


def _gather(ctx: Context, loop: Loop, outputs: list[str], inputs: set[str], later: set[str], accelerator: str,
            at: tuple[cst.BaseStatement, bool]) -> list[str]:
    """``output, target = accelerator.gather_for_metrics((output, target))``, gathering the outputs, then the batch
    names used after the forward (targets first, then inputs used again); a name the loop may set to None
    (``target = target if len(target) > 0 else None``) is gathered on its own under ``if target is not None:``. The
    agreement reads what it makes global from these statements. ``at``: the statement the gather goes after (True)
    or before (False); a second name for a batch part bound only later (``gold = heads``) is not bound yet there,
    and is made from the gathered part anyway."""
    gathered = [n for n in gathered_names(ctx.plan, loop, outputs, inputs, later)
                if n in outputs or _bound_by(ctx, loop, n, *at)]
    optional = optional_names(loop, gathered)
    # a batch part of file names or paths (N8's test set yields ``(file_name, image)``): a list of strings, which in
    # a tuple with tensors would send the whole tuple through ``gather_object`` (its parts then flattened together)
    texts = [n for n in gathered if n not in outputs and n not in optional and _names_texts(n)]
    gathered = [n for n in gathered if n not in optional and n not in texts]
    guarded = [f"if {n} is not None:\n    {_gather_line([n], accelerator)}" for n in optional]
    objects = [f"{n} = {accelerator}.gather_for_metrics({n}, use_gather_object=True)" for n in texts]
    return [_gather_line(gathered, accelerator), *objects, *guarded] if gathered else [*objects, *guarded]


def _gather_line(names: list[str], accelerator: str) -> str:
    if len(names) == 1:
        return f"{names[0]} = {accelerator}.gather_for_metrics({names[0]})"
    joined = ", ".join(names)
    return f"{joined} = {accelerator}.gather_for_metrics(({joined}))"


def _bound_by(ctx: Context, loop: Loop, name: str, stmt: cst.BaseStatement, after: bool) -> bool:
    """Whether ``name`` holds a value at the gather: a target of the loop, or bound in the loop's body before it."""
    if name in target_names(loop.node.target):
        return True
    order = ctx.facts.order
    limit = order[stmt][1] if after else order[stmt][0] - 1
    start, end = order[loop.node]
    return any(start <= order[b.stmt][0] <= limit and order[b.stmt][0] <= end
               for b in loop.scope.bindings.get(name, []) if b.stmt in order)


_TEXT_WORDS = ("name", "names", "path", "paths", "file", "files", "filename", "filenames", "fname", "fnames")


def _names_texts(name: str) -> bool:
    """Whether a batch part's name says it holds text (``names``, ``img_paths``, ``file_name``): a list of strings."""
    last = name.lower().split("_")[-1]
    return last in _TEXT_WORDS


def _discarded(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """Whether ``stmt`` is the forward ``call`` alone, its result thrown away."""
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and stmt.body[0].value is call)
