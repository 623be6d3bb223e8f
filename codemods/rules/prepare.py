"""InsertPrepare: one ``accelerator.prepare(...)`` after the last model/optimizer/loader/scheduler is
created, before the first training loop.

Models, then optimizers, then data loaders, then schedulers, each in creation order; a long call is
split over lines the way black would.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.context import Context
from accelify.codemods.rule import Example, Rule

LINE_LENGTH = 88


class InsertPrepare(Rule):
    name = "prepare"
    description = "Prepare every model, optimizer, data loader and scheduler in one call."
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
accelerator = Accelerator()
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
            before='''\
import torch
params = torch.nn.Linear(2, 1).parameters()
ordered = list(params)
print(len(ordered))
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        plan = ctx.plan
        builder = plan.builder
        if builder is None or builder not in ctx.accelerators:
            return
        accelerator = ctx.accelerators[builder]
        objects = []
        for binding in plan.prepared:
            if binding.loop is None:
                objects.append(binding)
            elif binding.role in ("model", "optimizer"):
                # an unprepared model or optimizer would train unsynchronised copies on N processes
                ctx.abort(codes.MODEL_IN_LOOP, binding.stmt, name=binding.key)
            else:
                ctx.warn(codes.BUILT_IN_LOOP, binding.stmt, name=binding.key)
        if not objects:
            return
        body = builder.body
        tops = [ctx.facts.top_stmt(b.stmt, builder) for b in objects]
        last = max((t for t in tops if t is not None), key=body.index)
        first_loop = next(
            (i for i, s in enumerate(body) for loop in plan.training_loops(builder) if loop.node is s), None
        )
        if first_loop is not None and body.index(last) > first_loop:
            culprit = objects[tops.index(last)]
            ctx.abort(codes.CREATED_AFTER_LOOP, culprit.stmt, name=culprit.key)
        names = [b.key for b in objects]
        ctx.insert_after(last, [_prepare_code(names, accelerator, _depth(ctx, last) * _indent(ctx))])
        ctx.change(f"prepare {', '.join(names)}")


def _prepare_code(names: list[str], accelerator: str, indent: str) -> str:
    joined = ", ".join(names)
    head = f"{joined} = {accelerator}.prepare("
    if len(indent) + len(head) + len(joined) + 1 <= LINE_LENGTH:
        return f"{head}{joined})"
    inner = indent + " " * 4
    if len(inner) + len(joined) <= LINE_LENGTH:
        return f"{head}\n    {joined}\n)"
    return head + "\n" + "".join(f"    {name},\n" for name in names) + ")"


def _depth(ctx: Context, stmt: cst.BaseStatement) -> int:
    return len(ctx.facts.chain(stmt)) - 1


def _indent(ctx: Context) -> str:
    return ctx.facts.module.default_indent
