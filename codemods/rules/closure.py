"""ReduceClosureLoss: the loss a closure returns to ``optimizer.step(closure)`` is the same on every process.

L-BFGS decides how many inner steps to take from the losses its closure returns. Each process's loss
is its own batch's, so the processes could stop after different numbers of inner steps, and the ones
that go on wait for the others in the next backward. ``return loss`` becomes ``return
accelerator.reduce(loss.detach(), "mean")``: every process sees the mean (on one process, the loss
itself), and decides the same way.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.rule import Example, Rule


class ReduceClosureLoss(Rule):
    name = "closure"
    description = "Make the loss a step closure returns the same on every process."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)
for x, y in loader:
    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss
    optimizer.step(closure)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        return accelerator.reduce(loss.detach(), "mean")
    optimizer.step(closure)
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
def log(value):
    return value
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    log(loss)
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
def log(value):
    return value
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    log(loss)
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        plan = ctx.plan
        done: set[int] = set()
        for site in ctx.facts.calls:
            if site.method != "step" or not isinstance(site.node.func, cst.Attribute):
                continue
            found = plan.origin(site.scope, site.node.func.value)
            if found is None or found.role != "optimizer":
                continue
            for closure in plan.callbacks(site):
                accelerator = ctx.accelerator_in(closure)
                if accelerator is None or id(closure) in done:
                    continue
                done.add(id(closure))
                for ret in closure.returns:
                    stmt = next((s for s in ctx.facts.order if isinstance(s, cst.SimpleStatementLine) and ret in s.body), None)
                    if ret.value is None or stmt is None:
                        continue
                    reduced = expression(f'{accelerator}.reduce(({code_of(ret.value)}).detach(), "mean")') if not isinstance(
                        ret.value, (cst.Name, cst.Attribute)
                    ) else expression(f'{accelerator}.reduce({code_of(ret.value)}.detach(), "mean")')
                    if ctx.replace(ret.value, stmt, lambda _, r=reduced: r):  # type: ignore[misc]
                        ctx.change("the closure's loss is reduced across processes")
