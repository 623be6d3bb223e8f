"""ReduceAverages: a running sum over a prepared loader, read after the loop, is reduced across processes
right after the loop, so the average printed, returned, logged or compared is the whole data set's.

What is summed and how is ``analysis/shard_sums.py``'s. A number goes through a 0-d tensor and back
(``accelerator.reduce`` takes tensors, in Hugging Face Accelerate too), ``float64`` for a float so that one
process prints exactly what the original printed (an ``.item()`` that may be an int or a float keeps its type:
``type(total)(...)``); a tensor is reduced as it is. ``"sum"`` unless the value is
divided by a per-process count (``len(loader)``, a batch counter, the loop's ``enumerate`` counter): then ``"mean"``,
the processes walking the same number of batches (even batches, the runtime's default). A sum of per-batch means
(a mean loss, a ``.mean()``) with ``split_batches=True`` (a converted ``DataParallel`` script: every process holds 1/N
of each batch and walks every step) is averaged too; dealt whole batches, the processes' sums add up. Sums of values
already global (gathered for metrics by the evaluation rule) are ``rules/gathered_sums.py``'s;
running values printed inside the loop every N steps (one process's, by convention) are left alone. A list of per-batch
numbers summarised after the pass (``np.mean(losses)``) is gathered there (``accelerator.gather`` of a 1-d tensor,
``.tolist()``). Meters of the program's own class (an ``AverageMeter`` whose ``update`` only adds to its attributes),
one or several held in a dict, a list, a ``SimpleNamespace`` or a trainer's attribute made again before the loop, get each summed attribute reduced and the attributes
``update`` computes from them computed again (``analysis/meter_sums.py``). A loss curve (``losses.append(loss.item())``
at every step, read after training) keeps each step's loss reduced where it is appended (``analysis/loss_curves.py``).
What cannot be reduced (a meter not proven
so, a list read in order, a sum divided by a count it cannot place, a loop some processes may not run) is reported
(ACC028), as are sums over batches a loop draws itself with ``next`` (``analysis/drawn_sums.py``) and sums a model
keeps on itself across its forwards (``analysis/model_sums.py``), read after the loop.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.drawn_sums import drawn_sums
from accelify.codemods.analysis.model_sums import model_sums
from accelify.codemods.analysis.placed import split_batches
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.gathered_values import gathered_in, global_sum, is_global, local_meters
from accelify.codemods.analysis.loss_curves import curve_tensor
from accelify.codemods.analysis.loss_means import batch_mean
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.shard_sums import find_averages
from accelify.codemods.analysis.sum_reductions import meter_code, reduction_code
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class ReduceAverages(Rule):
    name = "averages"
    description = "Reduce running sums over a sharded loader across processes before they are read after the loop."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader, optimizer):
    total, seen = 0.0, 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * x.size(0)
        seen += x.size(0)
    return total / seen


def epoch(model, loader, optimizer):
    running = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss.item()
    return running / len(loader)


model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
print(train(model, loader, optimizer), epoch(model, loader, optimizer))
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator()


def train(model, loader, optimizer):
    total, seen = 0.0, 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        total += loss.item() * x.size(0)
        seen += x.size(0)
    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()
    seen = accelerator.reduce(torch.tensor(seen, device=accelerator.device), "sum").item()
    return total / seen


def epoch(model, loader, optimizer):
    running = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        running += loss.item()
    running = accelerator.reduce(torch.tensor(running, dtype=torch.float64, device=accelerator.device), "mean").item()
    return running / len(loader)


model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
accelerator.print(train(model, loader, optimizer), epoch(model, loader, optimizer))
accelerator.end_training()
''',
        ),
        Example(
            # a running value kept in an object whose class is not the program's (not proven a meter): reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from meters import AverageMeter

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
meter = AverageMeter()
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    meter.update(loss.item(), x.size(0))
print(meter.avg)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from meters import AverageMeter
from accelify.runtime import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
meter = AverageMeter()
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    meter.update(loss.item(), x.size(0))
accelerator.print(meter.avg)
accelerator.end_training()
''',
            warnings=("ACC028:13",),
        ),
        Example(
            # meters of the program's own class, kept in a dict: every sum and count is reduced, the average computed
            # again from them (``analysis/meter_sums.py``)
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    def __init__(self):
        self.sum, self.count, self.avg = 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
meters = {"loss": AverageMeter(), "lr": AverageMeter()}
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    meters["loss"].update(loss.item(), x.size(0))
    meters["lr"].update(optimizer.param_groups[0]["lr"])
print({k: meter.avg for k, meter in meters.items()})
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator()


class AverageMeter:
    def __init__(self):
        self.sum, self.count, self.avg = 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
meters = {"loss": AverageMeter(), "lr": AverageMeter()}
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    meters["loss"].update(loss.item(), x.size(0))
    meters["lr"].update(optimizer.param_groups[0]["lr"])
meters["loss"].sum = accelerator.reduce(torch.tensor(meters["loss"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
meters["loss"].count = accelerator.reduce(torch.tensor(meters["loss"].count, device=accelerator.device), "sum").item()
meters["loss"].avg = meters["loss"].sum / meters["loss"].count
meters["lr"].sum = accelerator.reduce(torch.tensor(meters["lr"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
meters["lr"].count = accelerator.reduce(torch.tensor(meters["lr"].count, device=accelerator.device), "sum").item()
meters["lr"].avg = meters["lr"].sum / meters["lr"].count
accelerator.print({k: meter.avg for k, meter in meters.items()})
accelerator.end_training()
''',
        ),
        Example(
            # printed inside the loop every N steps (one process's, by convention), and a sum of gathered values
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
running = 0.0
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    running += loss.item()
    if i % 2 == 1:
        print(running / 2)
        running = 0.0
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
running = 0.0
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    running += loss.item()
    if i % 2 == 1:
        accelerator.print(running / 2)
        running = 0.0
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        self._report_own_counts(ctx)
        found = ctx.plan.analysis(find_averages)
        if not found.accumulators and not found.kept and not found.meters:
            return
        agreement = ctx.agreement
        reduced, kept_values = local_meters(agreement, found.meters)
        for kept in found.kept + kept_values:
            gathered = gathered_in(agreement, kept.loop)
            if any(ctx.reported(site.node) for site in kept.loop.calls):
                continue  # the loop's metric is already reported as local (ACC016)
            if kept.local or any(not is_global(agreement, kept.loop.scope, v, kept.node, gathered) for v in kept.values):
                if not kept.local and not gathered and _reduce_curve(ctx, kept.loop, kept.node):
                    continue
                ctx.warn(codes.SHARD_AVERAGE, kept.node, name=kept.name)
        reductions: dict[cst.For | cst.While, list[str]] = {}
        derived: dict[cst.For | cst.While, list[cst.BaseStatement]] = {}
        at_else: set[cst.For | cst.While] = set()
        split = split_batches(ctx.plan)
        for acc in found.accumulators:
            scope = acc.loop.scope
            if global_sum(agreement, ctx.facts, acc, gathered_in(agreement, acc.loop)):
                continue  # already the whole data set's: rules/gathered_sums.py makes it the original's or reports it
            accelerator = ctx.accelerator_in(scope)
            torch = _torch_name(ctx, acc.loop)
            if accelerator is None or torch is None or agreement.collective_place(acc.end, scope) is None or ctx.is_skipped(acc.end):
                ctx.warn(codes.SHARD_AVERAGE, acc.updates[0], name=acc.name)
                continue
            # with split batches every process holds 1/N of each batch and walks every step: its sum of per-batch
            # means is already the whole sum's share of 1/N of each mean, so the processes' sums are averaged
            means = split and not acc.mean and not acc.keys and all(batch_mean(ctx.plan, ctx.facts, acc.loop, v) for v in acc.increments)
            reductions.setdefault(acc.end, []).append(reduction_code(acc, accelerator, torch, acc.mean or means))
            derived.setdefault(acc.end, [])
            derived[acc.end] += [s for s in acc.derived if s not in derived[acc.end]]
            if acc.at_else:
                at_else.add(acc.end)
        for meters in reduced:
            # with split batches every process walks every step: a meter fed once a step would count N times as many
            accelerator, torch = ctx.accelerator_in(meters.loop.scope), _torch_name(ctx, meters.loop)
            if accelerator is None or torch is None or agreement.collective_place(meters.end, meters.loop.scope) is None \
                    or ctx.is_skipped(meters.end) or split:
                ctx.warn(codes.SHARD_AVERAGE, meters.updates[0], name=meters.name)
                continue
            reductions.setdefault(meters.end, []).extend(meter_code(meters, accelerator, torch))
            derived.setdefault(meters.end, [])
        for loop, code in reductions.items():
            # a value computed in the loop from the sums and read after it is computed again from the reduced sums
            code = code + [_code(s) for s in derived[loop]]
            if loop in at_else and loop.orelse is not None and isinstance(loop.orelse.body, cst.IndentedBlock):
                ctx.insert_before(loop.orelse.body.body[0], code)  # read in ``for ... else:``: first there
            else:
                ctx.insert_after(loop, code)
            ctx.change("reduce running sums over a sharded loader across processes")


    def _report_own_counts(self, ctx: Context) -> None:
        """Sums over batches a loop draws itself with ``next`` (``analysis/drawn_sums.py``) and sums a model keeps
        on itself (``analysis/model_sums.py``), read after the loop: one process's share, reported."""
        for drawn in ctx.plan.analysis(drawn_sums):
            if not ctx.agreement.uniform(drawn.scope, drawn.value, drawn.update):
                ctx.warn(codes.SHARD_AVERAGE, drawn.update, name=drawn.name)
        for kept in ctx.plan.analysis(model_sums):
            ctx.warn(codes.SHARD_AVERAGE, kept.read, name=kept.name)


def _reduce_curve(ctx: Context, loop: Loop, stmt: cst.BaseStatement) -> bool:
    """``losses.append(loss.item())`` at every pass: the step's loss reduced across processes where it is appended
    (``analysis/loss_curves.py``); the edit is proposed and True returned, else nothing is changed."""
    accelerator = ctx.accelerator_in(loop.scope)
    found = curve_tensor(ctx.plan, ctx.agreement, loop, stmt) if accelerator is not None else None
    if found is None or ctx.is_skipped(stmt):
        return False
    item, tensor = found
    code = f'{accelerator}.reduce({tensor}.detach(), "mean").item()'
    ctx.replace(item, stmt, lambda _, c=code: expression(c))  # type: ignore[misc]
    ctx.change("reduce each step's loss across processes where a loss curve keeps it")
    return True


def _code(stmt: cst.BaseStatement) -> str:
    """``stmt``'s source, alone (no blank lines or comments above it)."""
    return cst.Module(body=[]).code_for_node(stmt.with_changes(leading_lines=())).strip()


def _torch_name(ctx: Context, loop: Loop) -> str | None:
    """How the loop's module spells ``torch`` (``import torch``), or None when it does not import it whole."""
    imports = ctx.facts.unit_of(loop.scope).imports
    return imports.alias_of("torch")
