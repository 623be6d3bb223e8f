"""SumPerOriginalBatch: a running sum over a loop whose batches the evaluation rule gathers for metrics is made
the original's, or reported (ACC042), never left as one pass's values.

What is summed and how is ``analysis/shard_sums.py``'s; a sum whose every value added is global (gathered, or computed
from gathered values alone: ``analysis/gathered_values.py``) is already the whole data set's, and this rule's (the
others are reduced across processes by ``rules/averages.py``). Each pass of such a loop holds N processes' batches, so
it runs 1/N as many times as the original's. A sum of a batch's mean loss (``test_loss += criterion(out, y).item()``,
divided by the data set's size) adds, at each pass, the mean loss of each of the original's batches the pass holds
(``loss_means.per_batch_sum``), so it is the original's sum; a value computed from such a mean loss by statements of
the loop (``psnr = 10 * log10(1 / mse.item())``) and divided by ``len(loader)`` is computed per original batch and
divided by the original's number of batches (``batch_chains.py``). Where one value's fix is not enough (a list of
per-batch values, an accuracy that is a batch's mean, a mean loss summed next to other statements that read the batch,
a count divided by the number of batches), the loop's statements from the gather to its last update run per original
batch and the sums over ``len(loader)`` are divided by the original's number of batches (``batch_tails.py``); what
else does not fit (a statement there that cannot run per batch, a mean loss of values the loop does not gather, a sum
divided by the loop's last index) is reported (ACC042).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.batch_chains import BatchChain, batch_chain, per_batch_loop
from accelify.codemods.analysis.batch_tails import per_batch_tail
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.gathered_values import (
    BATCH_MEANS,
    BY_PASS_INDEX,
    MEAN_LOSSES,
    PER_PASS_LIST,
    TRANSFORMED,
    gathered_in,
    gathered_mismatch,
    global_sum,
    is_global,
    local_meters,
)
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.reduced_outputs import read_names
from accelify.codemods.analysis.row_sums import row_sum_divisors
from accelify.codemods.analysis.shard_counts import divided_by_pass_index
from accelify.codemods.analysis.loss_means import batch_mean, mean_loss, per_batch_sum, rowwise_names, transformed_mean_loss
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.shard_sums import Accumulator, find_averages
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class SumPerOriginalBatch(Rule):
    name = "gathered_sums"
    description = ("Make running sums over a loop gathered for metrics the original's: add per original batch the pass "
                   "holds, or report why not.")
    examples = (
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
            # a count over a gathered evaluation, divided by the data set's size: the whole data set's, as the original's
            before='''\
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
correct = 0
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        correct += (out.argmax(1) == y).sum().item()
print(correct / len(loader.dataset))
''',
            after='''\
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
correct = 0
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        out, y = accelerator.gather_for_metrics((out, y))
        correct += (out.argmax(1) == y).sum().item()
accelerator.print(correct / len(loader.dataset))
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
        _, kept_values = local_meters(agreement, found.meters)
        for kept in found.kept + kept_values:
            if _unread(ctx, kept.loop, kept.name):
                continue
            gathered = gathered_in(agreement, kept.loop)
            if any(ctx.reported(site.node) for site in kept.loop.calls):
                continue  # the loop's metric is already reported as local (ACC016)
            if kept.local or any(not is_global(agreement, kept.loop.scope, v, kept.node, gathered) for v in kept.values):
                continue  # this process's share: the averages rule reports it (ACC028)
            if gathered and any(transformed_mean_loss(ctx.plan, kept.loop, v) for v in kept.values) \
                    and (len(kept.values) != 1 or not _per_batch_chain(ctx, kept.name, kept.loop, kept.node)):
                ctx.warn(codes.GATHERED_SUM, kept.node, name=kept.name, why=TRANSFORMED)
            elif gathered and (index := divided_by_pass_index(ctx.plan, kept.loop, kept.name)) is not None:
                ctx.warn(codes.GATHERED_SUM, kept.node, name=kept.name, why=BY_PASS_INDEX.format(index=index))
            elif gathered and kept in found.kept and any(  # (a meter weighs what it is fed by its count)
                    batch_mean(ctx.plan, ctx.facts, kept.loop, v) or mean_loss(ctx.plan, kept.loop, v) for v in kept.values):
                ctx.warn(codes.GATHERED_SUM, kept.node, name=kept.name, why=BATCH_MEANS)  # whatever it is divided by
        tailed = _per_batch_tails(ctx, found.accumulators)
        for acc in found.accumulators:
            if _unread(ctx, acc.loop, acc.name):
                continue  # computed and never used (O10's evaluation loss, its print commented out)
            if not global_sum(agreement, ctx.facts, acc, gathered_in(agreement, acc.loop)):
                continue  # this process's share: the averages rule reduces it
            if id(acc) in tailed:
                continue  # the loop's statements from the gather on run per original batch
            why = gathered_mismatch(ctx.plan, acc)  # sums of gathered values: already the whole data set's, but
            one = len(acc.updates) == 1 and acc.end is acc.loop.node
            if acc.kind.endswith("list"):
                ctx.warn(codes.GATHERED_SUM, acc.updates[0], name=acc.name, why=PER_PASS_LIST)
                continue
            if why is None and (acc.mean or _means(ctx, acc)):
                if _row_sums(ctx, acc):
                    continue  # summed over the rows of each pass: only the number of batches is the original's
                if not (acc.mean and one and _per_batch_chain(ctx, acc.name, acc.loop, acc.updates[0])):
                    ctx.warn(codes.GATHERED_SUM, acc.updates[0], name=acc.name, why=BATCH_MEANS)
                continue  # a mean loss over ``len(loader)``: computed per original batch
            if why is not None and not (why is MEAN_LOSSES and _sum_batch_means(ctx, acc)) \
                    and not (why is TRANSFORMED and len(acc.updates) == 1 and acc.end is acc.loop.node
                             and _per_batch_chain(ctx, acc.name, acc.loop, acc.updates[0])):  # over 1/N as many
                ctx.warn(codes.GATHERED_SUM, acc.updates[0], name=acc.name, why=why)  # passes, each of N batches


def _row_sums(ctx: Context, acc: Accumulator) -> bool:
    """``TP += np.sum(pred & mask) / n`` over a gathered loop, then ``TP / len(loader)`` (``analysis/row_sums.py``):
    the divisor becomes the original's number of batches; the edits are proposed and True returned."""
    found = row_sum_divisors(ctx.plan, acc.loop, acc, reads_after(ctx.plan, acc.loop.node, acc.loop.scope, acc.name),
                             ctx.target == "accelerate")
    if found is None:
        return False
    divisors, batches = found
    for divisor, stmt in divisors:
        ctx.replace(divisor, stmt, lambda _, c=batches: expression(c))  # type: ignore[misc]
    ctx.change("divide a sum over the rows of a gathered loop by the original's number of batches")
    return True


def _unread(ctx: Context, loop: Loop, name: str) -> bool:
    """Whether nothing reads the sum ``name`` after ``loop`` but its own updates (``avg_loss /= len(dataset)``, its
    print commented out): what it holds on N processes changes no output, so there is nothing to fix or to report. In
    a function only (a module's name may be read by any function), where no ``global``/``nonlocal`` names it."""
    scope = loop.scope
    if "." in name or scope.kind != "function" or any(
            name in (n.name.value for n in g.names) for g in m.findall(scope.node, m.Global() | m.Nonlocal())):  # type: ignore[union-attr]
        return False
    for stmt in reads_after(ctx.plan, loop.node, scope, name):
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not (isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and small.target.value == name
                and name not in read_names(small.value)):
            return False
    return True


def _global_sums(ctx: Context, accumulators: list[Accumulator]) -> dict[int, list[Accumulator]]:
    """The sums and lists of each gathered loop (by the loop's ``id``) whose every value added is global."""
    agreement = ctx.agreement
    by_loop: dict[int, list[Accumulator]] = {}
    for acc in accumulators:
        gathered = gathered_in(agreement, acc.loop)
        if gathered and global_sum(agreement, ctx.facts, acc, gathered):
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
    return any(batch_mean(ctx.plan, ctx.facts, acc.loop, v) and not mean_loss(ctx.plan, acc.loop, v) for v in acc.increments)


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
                        ctx.target == "accelerate", agreement.forward_names)
    return None if chain is None or any(ctx.is_skipped(s) for s in chain.stmts) else chain
