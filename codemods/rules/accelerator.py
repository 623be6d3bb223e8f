"""CreateAccelerator: ``accelerator = Accelerator(...)`` as early as possible in the builder, after
the values its arguments depend on (``args = parser.parse_args()`` for ``cpu=args.no_cuda``); the
device rule then rewrites or removes ``device``. In a trainer class that builds its objects in
``__init__`` the accelerator is ``self.accelerator``.

Its name, arguments and place are the plan's ``Creation`` analysis (``analysis/creation.py``), which the
imports rule reads too; this rule writes the statement and declares where the accelerator now is.
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class CreateAccelerator(Rule):
    name = "accelerator"
    description = "Create the Accelerator in the function (or module) that builds the model and optimizer."
    examples = (
        Example(
            before='''\
import argparse
import torch

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")
    model = torch.nn.Linear(2, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x.to(device)).sum().backward()
        optimizer.step()
''',
            after='''\
import argparse
import torch
from accelify.runtime import Accelerator

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=args.no_cuda)
    device = accelerator.device
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x.to(device)).sum())
        optimizer.step()
    accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
print(model(torch.ones(2)))
''',
            fires=False,
        ),
        Example(
            before='''\
import torch

x = torch.linspace(-1, 1, 100).unsqueeze(1)
y = 3 * x + 0.5 + 0.1 * torch.randn_like(x)
w = torch.zeros(1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.1
for epoch in range(200):
    loss = ((x * w + b - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad.zero_()
        b.grad.zero_()
print(f"w={w.item():.2f} b={b.item():.2f}")
''',
            warnings=("ACC012:10",),
        ),
        Example(  # an AMP flag the trainer makes itself: ``main`` has no name for it (written there: a NameError)
            before='''\
import argparse
import torch


def options():
    return argparse.Namespace(amp=False)


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.args = options()

    def fit(self, loader):
        scaler = torch.cuda.amp.GradScaler(enabled=self.args.amp)
        for (x,) in loader:
            with torch.autocast("cuda", enabled=self.args.amp):
                loss = self.model(x).sum()
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(4, 2)))
    Trainer(model, optimizer).fit(loader)
''',
            warnings=("ACC044:26",),
        ),
        Example(  # the device flag set after the objects: the accelerator must exist before them
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Agent:
    def __init__(self, config):
        self.config = config
        self.model = torch.nn.Linear(4, 1)
        self.loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.is_cuda = torch.cuda.is_available()
        self.cuda = self.is_cuda & self.config["cuda"]
        if self.cuda:
            self.device = torch.device("cuda")
        else:
            self.device = torch.device("cpu")

    def train(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.model(x.to(self.device)), y.to(self.device))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


Agent({"cuda": True}).train()
''',
            warnings=("ACC046:7",),
        ),
    )

    def run(self, ctx: Context) -> None:
        creation = ctx.plan.analysis(Creation)
        home = creation.home
        if home is None:
            backward = next((s for s in ctx.facts.calls if s.method == "backward"), None)
            if backward is not None and ctx.facts.looped(backward):
                # it trains, and nothing here can be prepared: "unchanged" (exit 0) would pass over a training
                # that is not converted, so the file needs attention
                ctx.abort(codes.NOTHING_TO_PREPARE, backward.node)
            if backward is not None:
                ctx.warn(codes.NOTHING_TO_PREPARE, backward.node)
            return
        block, index = creation.block, creation.index
        if creation.late is not None:
            ctx.abort(codes.MANUAL_DISTRIBUTED, block[index], name=code_of(block[index]).strip().splitlines()[0],
                      fix=f"bind `{creation.late}` before it reads the launcher's values (the accelerator needs it and must come first)")
        if creation.unseen is not None:
            ctx.abort(codes.UNSEEN_ARGUMENT, block[min(index, len(block) - 1)], **creation.unseen)
        if creation.bound_late is not None:
            ctx.abort(codes.BOUND_LATE, block[min(index, len(block) - 1)], name=creation.bound_late,
                      home=ctx.plan.home.name if ctx.plan.home is not None else "the module")
        # ungrouped: a rule that guards the statements around it (``logging.basicConfig(...)`` first, kept to the
        # main process) must not put the accelerator inside ``if accelerator.is_main_process:`` (a NameError)
        if creation.after:
            ctx.insert_after(block[index - 1], [creation.code()], ungrouped=True)
        else:
            ctx.insert_before(block[index], [creation.code()], ungrouped=True)
        ctx.bind_accelerator(home, creation.name)
        if creation.name.startswith("self.") and home.class_scope is not None:
            ctx.bind_accelerator(home.class_scope, creation.name)
        for callback, trainer in creation.callbacks:  # ``batch_end_callback(trainer)``, called by the trainer with itself
            ctx.bind_accelerator(callback, f"{trainer}.accelerator")
        ctx.change(f"create the Accelerator in {home.name}")
