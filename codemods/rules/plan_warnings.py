"""WarnPlanProblems: what the plan leaves as it is, without refusing the file, is reported.

It runs right after ``rules/refusals.py``, which stops the conversion on any problem the plan cannot settle: what is
left of ``plan.problems`` then converts correctly, and each is said once, with its code:

- ACC022: a training loop walks data followed to a value of a library that makes no DataLoader (``pandas``,
  ``datasets``; ``analysis/walked_data.py``): every process trains on the same data, correct but no faster than one;
- ACC027: a scheduler created inside a loop, left out of ``prepare``.

A file that is refused reports only its refusals: these warnings are never written then. The same questions as the
refusals rule's pick what is warned (a problem not refused; data known to be no DataLoader), so with ``refusals``
turned off only these warnings are written, never one for a problem it would have refused.
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.analysis import plan as found
from accelify.codemods.analysis.walked_data import walks_no_loader
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

# the kinds of problem the plan records without refusing (``refuse=False``), other than the data it cannot follow
WARNED = {found.SCHEDULER_IN_LOOP: codes.SCHEDULER_IN_LOOP}


class WarnPlanProblems(Rule):
    name = "plan_warnings"
    description = "Report what the plan leaves as it is: data that is no DataLoader, a scheduler made in a loop."
    examples = (
        Example(
            # data followed to a Hugging Face ``datasets`` table, which is no DataLoader: every process walks all of it
            before='''\
import torch
from datasets import load_dataset


def main():
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    rows = load_dataset("csv", data_files="train.csv", split="train").with_format("torch")
    for epoch in range(10):
        for row in rows:
            loss = torch.nn.functional.mse_loss(model(row["x"]), row["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''\
import torch
from datasets import load_dataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    rows = load_dataset("csv", data_files="train.csv", split="train").with_format("torch")
    for epoch in range(10):
        for row in rows:
            loss = torch.nn.functional.mse_loss(model(row["x"]), row["y"])
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    main()
''',
            warnings=("ACC022:10",),
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for cycle in range(3):  # warm restarts: a fresh one-cycle schedule each round
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=len(loader))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for cycle in range(3):  # warm restarts: a fresh one-cycle schedule each round
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=len(loader))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
accelerator.end_training()
''',
            warnings=("ACC027:8",),
        ),
        Example(  # the scheduler created once, before the loops: prepared with the rest, nothing to report
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=3 * len(loader))
for cycle in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=3 * len(loader))
model, optimizer, loader, scheduler = accelerator.prepare(
    model, optimizer, loader, scheduler
)
for cycle in range(3):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for problem in ctx.plan.problems:  # ``refusals`` stopped the conversion on any it refuses (unless turned off)
            if problem.refuse:
                continue
            if problem.kind == found.UNKNOWN_DATA:  # followed to a library's data that is no loader: the same data
                if walks_no_loader(ctx.facts, ctx.plan, problem.node):
                    ctx.warn(codes.SAME_DATA, problem.node)
            else:
                ctx.warn(WARNED[problem.kind], problem.node, **dict(problem.fields))
