"""GatherForMetrics: in an evaluation loop over a prepared loader, gather the predictions and the
targets from every process right after the forward pass, so sums and ``len(loader.dataset)`` stay right.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis import target_names
from accelify.codemods.context import Context
from accelify.codemods.facts import Loop
from accelify.codemods.rule import Example, Rule


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
        for loop in ctx.facts.loops:
            accelerator = ctx.accelerator_in(loop.scope)
            body = loop.node.body
            if accelerator is None or not isinstance(body, cst.IndentedBlock) or not _is_evaluation(ctx, loop):
                continue
            for index, stmt in enumerate(body.body):
                forward = _forward(ctx, loop, stmt)
                if forward is not None:
                    if not ctx.is_skipped(stmt):
                        ctx.insert_after(stmt, [_gather(ctx, loop, forward, body.body[index + 1 :], accelerator)])
                        ctx.change("gather predictions and targets for metrics")
                    break


def _is_evaluation(ctx: Context, loop: Loop) -> bool:
    """A loop over a prepared loader, under ``no_grad``/``inference_mode``, that never calls backward."""
    return (
        loop.no_grad
        and ctx.plan.loader_of(loop) is not None
        and not any(ctx.plan.reaches_backward(site) for site in loop.calls)
    )


def _gather(
    ctx: Context, loop: Loop, forward: tuple[str, set[str]], rest: Sequence[cst.BaseStatement], accelerator: str
) -> str:
    """``output, target = accelerator.gather_for_metrics((output, target))``: the output, then the batch
    names used after the forward (targets first, then inputs that are used again)."""
    output, inputs = forward
    later = _names_used(rest)
    batch = ctx.plan.batch_names(loop)
    used = [name for name in target_names(loop.node.target) if name in batch and name in later]
    gathered = [output] + [n for n in used if n not in inputs] + [n for n in used if n in inputs]
    if len(gathered) == 1:
        return f"{output} = {accelerator}.gather_for_metrics({output})"
    names = ", ".join(gathered)
    return f"{names} = {accelerator}.gather_for_metrics(({names}))"


def _forward(ctx: Context, loop: Loop, stmt: cst.BaseStatement) -> tuple[str, set[str]] | None:
    """``output = model(data)`` with a prepared model: (``"output"``, names passed in)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    call = assign.value
    if not isinstance(call, cst.Call):
        return None
    found = ctx.plan.prepared(loop.scope, call.func, stmt)
    if found is None or found.role != "model":
        return None
    inputs = {n.value for n in m.findall(call, m.Name()) if isinstance(n, cst.Name)}
    return assign.targets[0].target.value, inputs


def _names_used(stmts: Sequence[cst.BaseStatement]) -> set[str]:
    names: set[str] = set()
    for stmt in stmts:
        names |= {n.value for n in m.findall(stmt, m.Name()) if isinstance(n, cst.Name)}
    return names
