"""InsertPrepare: one ``accelerator.prepare(...)`` after the last model/optimizer/loader/scheduler is
created, before the first training loop.

Models, then optimizers, then data loaders, then schedulers, each in creation order; a long call is
split over lines the way black would.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.collect import is_docstring
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.engine.rule import Example, Rule

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
accelerator = Accelerator(cpu=True)
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
        for loader in plan.in_place:  # rebuilt every epoch: prepared every time, right where it is built
            accelerator = ctx.accelerator_in(loader.where)
            if accelerator is not None and isinstance(loader.stmt, cst.SimpleStatementLine):
                ctx.insert_after(loader.stmt, [f"{loader.key} = {accelerator}.prepare({loader.key})"])
                ctx.change(f"prepare {loader.key} where it is built")
        scope = plan.prepare_scope
        accelerator = ctx.accelerator_in(scope) if scope is not None else None
        if scope is None or accelerator is None or not plan.aliases:
            return
        names = [a.spelled for a in plan.aliases]
        code = _prepare_code(names, accelerator, _depth(ctx, plan.prepare_block) * _indent(ctx, scope))
        block = plan.prepare_block
        following = block[block.index(plan.prepare_after) + 1:] if plan.prepare_after in block else []
        if following and ctx.edits.vanishes(following[0]):
            # the wrap it replaces went (``if ddp: model = DDP(model)``, apex's ``amp.initialize``): it takes its place
            ctx.insert_before(following[0], [code])
        elif plan.prepare_after is not None:
            ctx.insert_after(plan.prepare_after, [code])
        else:  # every object arrives as a parameter: prepare them first thing
            block = plan.prepare_block
            first = 1 if len(block) > 1 and is_docstring(block[0]) else 0
            ctx.insert_before(block[first], [code])  # after an accelerator created there too (it is inserted first)
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


def _depth(ctx: Context, block: list[cst.BaseStatement]) -> int:
    return len(ctx.facts.chain(block[0])) - 1 if block else 0


def _indent(ctx: Context, scope: Scope) -> str:
    return ctx.facts.unit_of(scope).module.default_indent
