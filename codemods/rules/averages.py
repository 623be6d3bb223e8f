"""ReduceAverages: a running sum over a prepared loader, read after the loop, is reduced across processes
right after the loop, so the average printed, returned, logged or compared is the whole data set's.

What is summed and how is ``analysis/shard_sums.py``'s. A number goes through a 0-d tensor and back
(``accelerator.reduce`` takes tensors, in Hugging Face Accelerate too), ``float64`` for a float so that one
process prints exactly what the original printed (an ``.item()`` that may be an int or a float keeps its type:
``type(total)(...)``); a tensor is reduced as it is. ``"sum"`` unless the value is
divided by a per-process count (``len(loader)``, a batch counter, the loop's ``enumerate`` counter): then ``"mean"``,
the processes walking the same number of batches (even batches, the runtime's default). A sum of per-batch means
(a mean loss, a ``.mean()``) with ``split_batches=True`` (a converted ``DataParallel`` script: every process holds 1/N
of each batch and walks every step) is averaged too; dealt whole batches, the processes' sums add up. Sums of values already global (gathered for metrics by the evaluation rule) are left alone;
so are running values printed inside the loop every N steps (one process's, by convention). A list of per-batch
numbers summarised after the pass (``np.mean(losses)``) is gathered there (``accelerator.gather`` of a 1-d tensor,
``.tolist()``). Meters of the program's own class (an ``AverageMeter`` whose ``update`` only adds to its attributes),
one or several held in a dict, a list, a ``SimpleNamespace`` or a trainer's attribute made again before the loop, get each summed attribute reduced and the attributes
``update`` computes from them computed again (``analysis/meter_sums.py``). What cannot be reduced (a meter not proven
so, a list read in order, a sum divided by a count it cannot place, a loop some processes may not run) is reported
(ACC028). A sum over a loop whose batches the
evaluation rule gathers of a batch's mean loss (``test_loss += criterion(out, y).item()``, divided by the data set's
size) adds, at each pass, the mean loss of each of the original's batches the pass holds (``loss_means.per_batch_sum``),
so it is the original's sum; a value computed from such a mean loss by statements of the loop (``psnr = 10 *
log10(1 / mse.item())``) and divided by ``len(loader)`` is computed per original batch and divided by the original's
number of batches (``batch_chains.py``). Where one value's fix is not enough (a list of per-batch values, an
accuracy that is a batch's mean, a mean loss summed next to other statements that read the batch, a count divided by
the number of batches), the loop's statements from the gather to its last update run per original batch and the sums
over ``len(loader)`` are divided by the original's number of batches (``batch_tails.py``); what else does not fit
(a statement there that cannot run per batch, a mean loss of values the loop does not gather) is reported (ACC042),
never left as one pass's values.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.batch_chains import BatchChain, batch_chain, per_batch_loop
from accelify.codemods.analysis.batch_tails import per_batch_tail
from accelify.codemods.analysis.placed import split_batches
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.gathered_values import (
    BATCH_MEANS,
    BY_PASS_INDEX,
    MEAN_LOSSES,
    PER_PASS_LIST,
    TRANSFORMED,
    gathered_in,
    gathered_mismatch,
    guards_global,
    is_global,
)
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.shard_counts import divided_by_pass_index
from accelify.codemods.analysis.loss_means import mean_loss, per_batch_sum, rowwise_names, transformed_mean_loss
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.meter_sums import MeterSums
from accelify.codemods.analysis.shard_sums import Accumulator, Kept, find_averages
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
            # a batch's mean loss summed over a gathered evaluation and divided by the data set's size, and a count
            # divided by the number of batches: the pass's statements run per original batch, and the count is
            # divided by the original's number of batches
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.BCEWithLogitsLoss()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.rand(8, 1)), batch_size=2)
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
model.eval()
test_loss, correct = 0.0, 0
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        test_loss += criterion(out, y).item()
        correct += ((out > 0) == (y > 0.5)).sum().item()
print(test_loss / len(loader.dataset), correct / len(loader))
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.BCEWithLogitsLoss()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.rand(8, 1)), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
model.eval()
test_loss, correct = 0.0, 0
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        out, y = accelerator.gather_for_metrics((out, y))
        for out, y in zip(out.split(loader.batch_sampler.batch_size), y.split(loader.batch_sampler.batch_size)):
            test_loss += criterion(out, y).item()
            correct += ((out > 0) == (y > 0.5)).sum().item()
accelerator.print(test_loss / len(loader.dataset), correct / len(loader.batch_sampler.batch_sampler))
accelerator.end_training()
''',
        ),
        Example(
            # a list of mean losses over a gathered evaluation, with a print between the gather and the append: the
            # pass's statements cannot run per original batch, so the list (one value per pass) is reported
            before='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.CrossEntropyLoss()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
for x, y in loader:
    criterion(model(x), y).backward()
    optimizer.step()
model.eval()
losses = []
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        print(loss.item())
        losses.append(loss.item())
print(np.mean(losses))
''',
            after='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.CrossEntropyLoss()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    accelerator.backward(criterion(model(x), y))
    optimizer.step()
model.eval()
losses = []
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        out, y = accelerator.gather_for_metrics((out, y))
        loss = criterion(out, y)
        accelerator.print(loss.item())
        losses.append(loss.item())
accelerator.print(np.mean(losses))
accelerator.end_training()
''',
            warnings=("ACC042:19",),
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
        found = ctx.plan.analysis(find_averages)
        if not found.accumulators and not found.kept and not found.meters:
            return
        agreement = ctx.agreement
        reduced, kept_values = _local_meters(ctx, found.meters)
        for kept in found.kept + kept_values:
            gathered = gathered_in(agreement, kept.loop)
            if any(ctx.reported(site.node) for site in kept.loop.calls):
                continue  # the loop's metric is already reported as local (ACC016)
            if kept.local or any(not is_global(agreement, kept.loop.scope, v, kept.node, gathered) for v in kept.values):
                ctx.warn(codes.SHARD_AVERAGE, kept.node, name=kept.name)
            elif gathered and any(transformed_mean_loss(ctx.plan, kept.loop, v) for v in kept.values) \
                    and (len(kept.values) != 1 or not _per_batch_chain(ctx, kept.name, kept.loop, kept.node)):
                ctx.warn(codes.GATHERED_SUM, kept.node, name=kept.name, why=TRANSFORMED)
            elif gathered and (index := divided_by_pass_index(ctx.plan, kept.loop, kept.name)) is not None:
                ctx.warn(codes.GATHERED_SUM, kept.node, name=kept.name, why=BY_PASS_INDEX.format(index=index))
        reductions: dict[cst.For | cst.While, list[str]] = {}
        derived: dict[cst.For | cst.While, list[cst.BaseStatement]] = {}
        at_else: set[cst.For | cst.While] = set()
        split = split_batches(ctx.plan)
        tailed = _per_batch_tails(ctx, found.accumulators)
        for acc in found.accumulators:
            scope = acc.loop.scope
            gathered = gathered_in(agreement, acc.loop)
            if not acc.local and all(
                is_global(agreement, scope, v, u, gathered) and guards_global(agreement, ctx.facts, acc, u, gathered)
                for v, u in zip(acc.increments, acc.updates)
            ):
                if id(acc) in tailed:
                    continue  # the loop's statements from the gather on run per original batch
                why = gathered_mismatch(ctx.plan, acc)  # sums of gathered values: already the whole data set's, but
                one = len(acc.updates) == 1 and acc.end is acc.loop.node
                if acc.kind.endswith("list"):
                    ctx.warn(codes.GATHERED_SUM, acc.updates[0], name=acc.name, why=PER_PASS_LIST)
                    continue
                if why is None and (acc.mean or _means(ctx, acc)):
                    if not (acc.mean and one and _per_batch_chain(ctx, acc.name, acc.loop, acc.updates[0])):
                        ctx.warn(codes.GATHERED_SUM, acc.updates[0], name=acc.name, why=BATCH_MEANS)
                    continue  # a mean loss over ``len(loader)``: computed per original batch
                if why is not None and not (why is MEAN_LOSSES and _sum_batch_means(ctx, acc)) \
                        and not (why is TRANSFORMED and len(acc.updates) == 1 and acc.end is acc.loop.node
                                 and _per_batch_chain(ctx, acc.name, acc.loop, acc.updates[0])):  # over 1/N as many
                    ctx.warn(codes.GATHERED_SUM, acc.updates[0], name=acc.name, why=why)  # passes, each of N batches
                continue
            accelerator = ctx.accelerator_in(scope)
            torch = _torch_name(ctx, acc.loop)
            if accelerator is None or torch is None or agreement.collective_place(acc.end, scope) is None or ctx.is_skipped(acc.end):
                ctx.warn(codes.SHARD_AVERAGE, acc.updates[0], name=acc.name)
                continue
            # with split batches every process holds 1/N of each batch and walks every step: its sum of per-batch
            # means is already the whole sum's share of 1/N of each mean, so the processes' sums are averaged
            means = split and not acc.mean and not acc.keys and all(_batch_mean(ctx, acc, v) for v in acc.increments)
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


def _local_meters(ctx: Context, found: list[MeterSums]) -> tuple[list[MeterSums], list[Kept]]:
    """The meters to reduce, and, as running values kept, those of a loop that gathers for metrics fed values that
    are already global (left as they are) or partly global (reported). A value every process feeds alike in a loop
    that gathers nothing (the learning rate) is reduced with the rest: its sum and count are then the original's,
    which took N times as many steps."""
    local, kept = [], []
    for meters in found:
        gathered = gathered_in(ctx.agreement, meters.loop)
        if gathered and any(is_global(ctx.agreement, meters.loop.scope, v, u, gathered) for u, v in meters.values):
            kept += [Kept(meters.name, meters.loop, u, tuple(v for s, v in meters.values if s is u)) for u in meters.updates]
        else:
            local.append(meters)
    return local, kept


def _global_sums(ctx: Context, accumulators: list[Accumulator]) -> dict[int, list[Accumulator]]:
    """The sums and lists of each gathered loop (by the loop's ``id``) whose every value added is global."""
    agreement = ctx.agreement
    by_loop: dict[int, list[Accumulator]] = {}
    for acc in accumulators:
        gathered = gathered_in(agreement, acc.loop)
        if gathered and not acc.local and all(
            is_global(agreement, acc.loop.scope, v, u, gathered) and guards_global(agreement, ctx.facts, acc, u, gathered)
            for v, u in zip(acc.increments, acc.updates)
        ):
            by_loop.setdefault(id(acc.loop), []).append(acc)
    return by_loop


def _per_batch_tails(ctx: Context, accumulators: list[Accumulator]) -> set[int]:
    """Gathered loops with a running value that is one pass's where it should be one batch's (a list of mean losses, an
    accuracy that is a batch's mean, a mean loss summed next to it) and that no one-value fix below makes right: the
    loop's statements from the gather to its last update run per original batch (``analysis/batch_tails.py``). The
    ``id`` of every sum and list of those loops, now the original's."""
    done: set[int] = set()
    agreement = ctx.agreement
    for accs in _global_sums(ctx, accumulators).values():
        loop = accs[0].loop
        if not any(_per_pass(ctx, acc) for acc in accs):
            continue
        direct = set().union(*(agreement.gathered[s] for s in loop.stmts if agreement.gathers(s)))
        gathered = rowwise_names(loop, direct, agreement.gathered_nodes)
        reads = {acc.name: reads_after(ctx.plan, loop.node, loop.scope, acc.name) for acc in accs}
        tail = per_batch_tail(ctx.plan, agreement, loop, accs, gathered, reads, ctx.target == "accelerate")
        if tail is None or any(ctx.is_skipped(s) for s in tail.stmts):
            continue
        ctx.regroup(list(tail.stmts), lambda group, t=tail: per_batch_loop(t, group))  # type: ignore[misc]
        for divisor, stmt in tail.divisors:
            ctx.replace(divisor, stmt, lambda _, c=tail.batches: expression(c))  # type: ignore[misc]
        ctx.change("compute the values of a gathered pass per original batch")
        done |= {id(acc) for acc in accs}
    return done


def _per_pass(ctx: Context, acc: Accumulator) -> bool:
    """Whether a sum or list over a gathered loop holds values of whole passes where the original's held values of
    batches, and neither the sum of the mean loss of each batch nor one chain of statements per batch fixes it."""
    if acc.kind.endswith("list"):
        return True
    why = gathered_mismatch(ctx.plan, acc)
    one = len(acc.updates) == 1 and acc.end is acc.loop.node
    if why is MEAN_LOSSES:
        return _batch_mean_sums(ctx, acc) is None
    if why is TRANSFORMED or (why is None and acc.mean):
        return not (one and _chain(ctx, acc.name, acc.loop, acc.updates[0]) is not None)
    return why is not None or _means(ctx, acc)


def _means(ctx: Context, acc: Accumulator) -> bool:
    """Whether a value added is a batch's mean that is not a mean loss (those are ``MEAN_LOSSES``): ``torch.mean(eq)``,
    ``(pred == y).float().mean()``."""
    return any(_batch_mean(ctx, acc, v) and not mean_loss(ctx.plan, acc.loop, v) for v in acc.increments)


def _batch_mean_sums(ctx: Context, acc: Accumulator) -> list[str] | None:
    """The code of each value added as the sum of its mean loss over each original batch a pass holds, or None."""
    agreement = ctx.agreement
    direct = set().union(*(agreement.gathered[s] for s in acc.loop.stmts if agreement.gathers(s)))
    gathered = rowwise_names(acc.loop, direct, agreement.gathered_nodes)
    codes_ = [per_batch_sum(ctx.plan, acc.loop, v, gathered) for v in acc.increments]
    if any(c is None for c in codes_) or any(ctx.is_skipped(u) or ctx.rewritten(v) for u, v in zip(acc.updates, acc.increments)):
        return None
    return codes_  # type: ignore[return-value]


def _sum_batch_means(ctx: Context, acc: Accumulator) -> bool:
    """``test_loss += criterion(outputs, targets).item()`` over a gathered loop: each value added becomes the sum of
    the mean losses of the original's batches the pass holds (``analysis/loss_means.py``), when every value added is
    such a mean loss; the edits are proposed and True returned, else nothing is changed."""
    codes_ = _batch_mean_sums(ctx, acc)
    if codes_ is None:
        return False
    for update, value, code in zip(acc.updates, acc.increments, codes_):
        ctx.replace(value, update, lambda _, c=code: expression(c))  # type: ignore[misc]
    ctx.change("sum the mean loss of each original batch a gathered pass holds")
    return True


def _per_batch_chain(ctx: Context, name: str, loop: Loop, update: cst.BaseStatement) -> bool:
    """``psnr = 10 * log10(1 / mse.item())`` from ``mse = criterion(prediction, target)``, summed over a gathered loop
    and divided by ``len(loader)``: the statements run per original batch and the divisor counts the original's
    batches (``analysis/batch_chains.py``); the edits are proposed and True returned, else nothing is changed."""
    chain = _chain(ctx, name, loop, update)
    if chain is None:
        return False
    ctx.regroup(list(chain.stmts), lambda group: per_batch_loop(chain, group))
    for divisor, stmt in chain.divisors:
        ctx.replace(divisor, stmt, lambda _, c=chain.batches: expression(c))  # type: ignore[misc]
    ctx.change("compute a value of each original batch's mean loss per batch over a gathered pass")
    return True


def _chain(ctx: Context, name: str, loop: Loop, update: cst.BaseStatement) -> BatchChain | None:
    """``batch_chain`` of the sum ``name`` updated by ``update``, when none of its statements is skipped."""
    agreement = ctx.agreement
    direct = set().union(*(agreement.gathered[s] for s in loop.stmts if agreement.gathers(s)))
    gathered = rowwise_names(loop, direct, agreement.gathered_nodes)
    chain = batch_chain(ctx.plan, loop, name, update, gathered, reads_after(ctx.plan, loop.node, loop.scope, name),
                        ctx.target == "accelerate")
    return None if chain is None or any(ctx.is_skipped(s) for s in chain.stmts) else chain


def _code(stmt: cst.BaseStatement) -> str:
    """``stmt``'s source, alone (no blank lines or comments above it)."""
    return cst.Module(body=[]).code_for_node(stmt.with_changes(leading_lines=())).strip()


def _batch_mean(ctx: Context, acc: Accumulator, value: cst.BaseExpression) -> bool:
    """A batch's mean: a mean loss (``analysis/loss_means.py``) or a ``.mean()`` (``(pred == y).float().mean()``)."""
    inner = value.func.value if m.matches(value, m.Call(func=m.Attribute(attr=m.Name("item")), args=[])) else value  # type: ignore[attr-defined]
    torch_mean = isinstance(inner, cst.Call) and len(inner.args) == 1 and ctx.facts.unit_of(acc.loop.scope).imports.qualname(inner.func) == "torch.mean"
    return mean_loss(ctx.plan, acc.loop, value) or torch_mean \
        or m.matches(inner, m.Call(func=m.Attribute(attr=m.Name("mean")), args=[]))


def _torch_name(ctx: Context, loop: Loop) -> str | None:
    """How the loop's module spells ``torch`` (``import torch``), or None when it does not import it whole."""
    imports = ctx.facts.unit_of(loop.scope).imports
    return next((local for local, full in imports.aliases.items() if full == "torch"), None)
