"""SwapClipping: gradient clipping through the accelerator (it unscales and handles sharded models).
"""

from __future__ import annotations

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.roles import CLIPPING
from accelify.codemods.engine.rule import Example, Rule


class SwapClipping(Rule):
    name = "clipping"
    description = "Clip gradients with accelerator.clip_grad_norm_/clip_grad_value_."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
from torch.nn.utils import clip_grad_value_
for x in torch.ones(4, 2):
    model(x).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    clip_grad_value_(model.parameters(), 0.5)
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    accelerator.clip_grad_value_(model.parameters(), 0.5)
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
def clip_grad_norm_(parameters, limit):
    return limit
for x in torch.ones(4, 2):
    model(x).sum().backward()
    clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
def clip_grad_norm_(parameters, limit):
    return limit
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.facts.calls:
            if site.qualname not in CLIPPING:
                continue
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None:
                continue  # where threading could not bring the accelerator: the leftovers rule reports it (ACC009)
            method = site.qualname.rsplit(".", 1)[-1]
            func = expression(f"{accelerator}.{method}")
            if ctx.replace(site.node.func, site.stmt, lambda _, f=func: f):  # type: ignore[misc]
                ctx.change(f"torch.nn.utils.{method} -> accelerator.{method}")
