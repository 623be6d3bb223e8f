"""WarnRetry: training retried in an exception handler is reported: an error one process raises alone
leaves the others waiting.

``except RuntimeError: ... train_model(...)`` (the usual out-of-memory retry) works on one process. On N
processes one of them can run out of memory while the others wait for it in a collective of the first
attempt (the backward's gradient all-reduce); the retry then prepares and trains on that process alone,
and the run hangs. The conversion cannot make such an error agree between processes, so the handler is
converted like the rest and reported (ACC019): it is right when every process fails together.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class WarnRetry(Rule):
    name = "retry"
    description = "Report training that an exception handler retries (an error on one process hangs the others)."
    examples = (
        Example(
            before='''\
import torch


def train(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()


model = torch.nn.Linear(2, 1)
try:
    train(model)
except RuntimeError:
    train(model)
''',
            after='''\
import torch
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


def train(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()


model = torch.nn.Linear(2, 1)
try:
    train(model)
except RuntimeError:
    train(model)
accelerator.end_training()
''',
            warnings=("ACC019:14",),
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    import tqdm
except ImportError:
    tqdm = None
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
try:
    import tqdm
except ImportError:
    tqdm = None
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        order = ctx.facts.order
        for stmt in order:
            if not isinstance(stmt, cst.Try):
                continue
            for handler in stmt.handlers:
                body = handler.body.body if isinstance(handler.body, cst.IndentedBlock) else []
                if not body:
                    continue
                first, last = order[body[0]][0], order[body[-1]][1]
                if any(first <= order[s.stmt][0] <= last and ctx.plan.reaches_backward(s) for s in ctx.facts.calls):
                    ctx.warn(codes.RETRY, handler)
