"""RefusePlanProblems: what the plan could not settle stops the conversion (or, for two of them, is reported).

The plan decides what ``accelerator.prepare`` receives and where it goes; some programs leave it no right
answer, and converting them would train wrongly (a model built anew in every fold, a loader walked as it was
before ``prepare``). Each such problem is reported with its code, and the file is left unchanged:

- ACC007: a model or optimizer created inside a loop; ACC008: an object created after training starts;
- ACC014: no scope holds the model, its optimizer and the loaders together;
- ACC020: a training loop walks a loader as it was before ``prepare`` (every process would see all the data);
- ACC026: the training runs inside the model's own class.

Two only warn: ACC021 (training data that cannot be followed to where it is built) and ACC027 (a scheduler
created inside a loop, left out of ``prepare``).
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.analysis import plan as found
from accelify.codemods.engine.context import Abort, Context
from accelify.codemods.engine.rule import Example, Rule

CODES = {
    found.MODEL_IN_LOOP: codes.MODEL_IN_LOOP,
    found.SCHEDULER_IN_LOOP: codes.SCHEDULER_IN_LOOP,
    found.CREATED_AFTER_LOOP: codes.CREATED_AFTER_LOOP,
    found.BUILT_ELSEWHERE: codes.BUILT_ELSEWHERE,
    found.UNSHARDED: codes.UNSHARDED,
    found.UNKNOWN_DATA: codes.UNKNOWN_DATA,
    found.SELF_TRAINING_MODULE: codes.SELF_TRAINING_MODULE,
}


class RefusePlanProblems(Rule):
    name = "refusals"
    description = "Refuse a program the plan cannot prepare safely (and report the data it cannot follow)."
    examples = (
        Example(
            before='''\
import torch

def main():
    for fold in range(2):
        model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
''',
            warnings=("ACC007:5",),
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
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
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch

model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(100):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

# fine-tune the last layer with a smaller learning rate
head_optimizer = torch.optim.SGD(model[2].parameters(), lr=1e-4)
for step in range(20):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    head_optimizer.zero_grad()
    loss.backward()
    head_optimizer.step()
''',
            warnings=("ACC008:13",),
        ),
    )

    def run(self, ctx: Context) -> None:
        problems = ctx.plan.problems
        refused = [p for p in problems if p.refuse]
        if refused:
            raise Abort(*(ctx.warning(CODES[p.kind], p.node, **dict(p.fields)) for p in refused))
        for problem in problems:
            ctx.warn(CODES[problem.kind], problem.node, **dict(problem.fields))
