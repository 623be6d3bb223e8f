"""RefusePlanProblems: what the plan could not settle stops the conversion.

The plan decides what ``accelerator.prepare`` receives and where it goes; some programs leave it no right
answer, and converting them would train wrongly (a model built anew in every fold, a loader walked as it was
before ``prepare``). Each such problem is reported with its code, and the file is left unchanged:

- ACC007: a model or optimizer created inside a loop; ACC008: an object created after training starts;
- ACC014: no scope holds the model, its optimizer and the loaders together;
- ACC020: a training loop walks a loader as it was before ``prepare`` (every process would see all the data);
- ACC026: the training runs inside the model's own class;
- ACC038: the training walks a library's batch iterator that is no DataLoader (torchtext's ``BucketIterator``);
- ACC039: several classes or functions each build a whole training of their own, and a run may build more than one
  (one built per run, in the branches of an ``if`` on a flag, is converted each on its own: ``engine/alternatives.py``);
- ACC040: a trainer's builder method (``self.build_model()`` in ``__init__``) is called again elsewhere;
- ACC045: a trainer method holds the model ``__init__`` built with the objects it builds, but may run more than once
  (called per epoch) or beside another method that trains;
- ACC041: a gradient penalty (``torch.autograd.grad(..., create_graph=True)``) backwarded on its own.

- ACC021: a training loop walks data that cannot be followed to where it is built (a name followed nowhere, the
  result of a function the analysis cannot see into): if it is a DataLoader, every process would walk all of it.
  Data followed to a value of a library that makes no DataLoader (``pandas``, ``datasets``) is not refused
  (``analysis/walked_data.py``): ``rules/plan_warnings.py``, run next, reports it (ACC022), and the scheduler
  created inside a loop (ACC027) the plan leaves out of ``prepare``.
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.analysis import plan as found
from accelify.codemods.analysis.walked_data import walks_no_loader
from accelify.codemods.engine.context import Abort, Context
from accelify.codemods.engine.rule import Example, Rule

CODES = {
    found.MODEL_IN_LOOP: codes.MODEL_IN_LOOP,
    found.CREATED_AFTER_LOOP: codes.CREATED_AFTER_LOOP,
    found.BUILT_ELSEWHERE: codes.BUILT_ELSEWHERE,
    found.UNSHARDED: codes.UNSHARDED,
    found.UNKNOWN_DATA: codes.UNKNOWN_DATA,
    found.SELF_TRAINING_MODULE: codes.SELF_TRAINING_MODULE,
    found.SECOND_EXPERIMENT: codes.SECOND_EXPERIMENT,
    found.MODELS_IN_A_COLLECTION: codes.MODELS_IN_A_COLLECTION,
    found.NOT_A_LOADER: codes.NOT_A_LOADER,
    found.SEVERAL_TRAINERS: codes.SEVERAL_TRAINERS,
    found.REBUILT_BY_A_METHOD: codes.REBUILT_BY_A_METHOD,
    found.HELD_BY_A_METHOD: codes.HELD_BY_A_METHOD,
    found.PENALTY_ALONE: codes.PENALTY_ALONE,
    found.TRAININGS_IN_BRANCHES: codes.TRAININGS_IN_BRANCHES,
}


class RefusePlanProblems(Rule):
    name = "refusals"
    description = "Refuse a program the plan cannot prepare safely."
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
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
if finetune:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
else:
    model = torch.nn.Linear(2, 1)
    for (x,) in loader:
        model(x).sum().backward()
        optimizer.step()
''',
            warnings=("ACC051:5",),
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Experiment:
    def __init__(self, lr):
        self.model = torch.nn.Linear(16, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)


def train(exp, loader):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(exp.model(x), y)
        exp.optimizer.zero_grad()
        loss.backward()
        exp.optimizer.step()


if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    train(Experiment(lr=0.01), loader)
''',
            warnings=("ACC014:20",),
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def fit(model, loader):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main():
    model = torch.nn.Linear(16, 1)
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    fit(model, loader)
    fisher = [torch.zeros_like(p) for p in model.parameters()]  # for EWC on the next task
    for x, y in loader:
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for f, p in zip(fisher, model.parameters()):
            f += p.grad ** 2 / len(loader)
    torch.save(fisher, "fisher.pt")


main()
''',
            warnings=("ACC020:19",),
        ),
        Example(
            before='''\
import torch
from my_project.data import get_train_loader


def main():
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train_loader = get_train_loader(batch_size=32)
    for epoch in range(10):
        for x, y in train_loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            warnings=("ACC021:10",),
        ),
        Example(
            # torchtext's legacy BucketIterator, followed to the function that builds it: no DataLoader to shard
            before='''\
import torch
from torchtext.data import BucketIterator


def prepare_dataloaders(train, batch_size):
    train_iterator = BucketIterator(train, batch_size=batch_size, train=True)
    return train_iterator


def main(train):
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    training_data = prepare_dataloaders(train, 32)
    for batch in training_data:
        loss = model(batch.src).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''',
            warnings=("ACC038:14",),
        ),
        Example(
            # two trainer classes, each building its model and optimizer, both run to compare them: one prepare (and one
            # accelerator per process) cannot serve both
            before='''\
import argparse
import torch


class GAN:
    def __init__(self, loader):
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.Adam(self.G.parameters())
        self.loader = loader

    def train(self):
        for (x,) in self.loader:
            self.G(x).sum().backward()
            self.G_optimizer.step()


class WGAN:
    def __init__(self, loader):
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.RMSprop(self.G.parameters())
        self.loader = loader

    def train(self):
        for (x,) in self.loader:
            self.G(x).mean().backward()
            self.G_optimizer.step()


parser = argparse.ArgumentParser()
parser.add_argument("--gan_type", default="GAN")
args = parser.parse_args()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
GAN(loader).train()
WGAN(loader).train()
''',
            warnings=("ACC039:20",),
        ),
        Example(
            # the same trainers, one of them built per run (chosen by a flag): each is converted on its own
            before='''\
import argparse
import torch


class GAN:
    def __init__(self, loader):
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.Adam(self.G.parameters())
        self.loader = loader

    def train(self):
        for (x,) in self.loader:
            self.G(x).sum().backward()
            self.G_optimizer.step()


class WGAN:
    def __init__(self, loader):
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.RMSprop(self.G.parameters())
        self.loader = loader

    def train(self):
        for (x,) in self.loader:
            self.G(x).mean().backward()
            self.G_optimizer.step()


parser = argparse.ArgumentParser()
parser.add_argument("--gan_type", default="GAN")
args = parser.parse_args()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
gan = GAN(loader) if args.gan_type == "GAN" else WGAN(loader)
gan.train()
''',
            after='''\
import argparse
import torch
from accelify.runtime import Accelerator


class GAN:
    def __init__(self, loader):
        self.accelerator = Accelerator(cpu=True)
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.Adam(self.G.parameters())
        self.loader = loader
        self.G, self.G_optimizer, self.loader = self.accelerator.prepare(
            self.G, self.G_optimizer, self.loader
        )

    def train(self):
        for (x,) in self.loader:
            self.accelerator.backward(self.G(x).sum())
            self.G_optimizer.step()
        self.accelerator.end_training()


class WGAN:
    def __init__(self, loader):
        self.accelerator = Accelerator(cpu=True)
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.RMSprop(self.G.parameters())
        self.loader = loader
        self.G, self.G_optimizer, self.loader = self.accelerator.prepare(
            self.G, self.G_optimizer, self.loader
        )

    def train(self):
        for (x,) in self.loader:
            self.accelerator.backward(self.G(x).mean())
            self.G_optimizer.step()
        self.accelerator.end_training()


parser = argparse.ArgumentParser()
parser.add_argument("--gan_type", default="GAN")
args = parser.parse_args()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
gan = GAN(loader) if args.gan_type == "GAN" else WGAN(loader)
gan.train()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)

    def fit(self, x, y, epochs=100):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        for epoch in range(epochs):
            loss = torch.nn.functional.mse_loss(self(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return self


model = Regressor().fit(torch.randn(64, 16), torch.randn(64, 1))
''',
            warnings=("ACC026:12",),
        ),
        Example(  # a second experiment re-binds a list of optimizers after the first one trained
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
optimizers = [torch.optim.SGD(model[0].parameters(), lr=0.1), torch.optim.SGD(model[2].parameters(), lr=0.01)]
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad()

optimizers = [torch.optim.Adam(model[0].parameters()), torch.optim.Adam(model[2].parameters())]
for xb, yb in loader:
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad()
''',
            warnings=('ACC035:14',),
        ),
        Example(  # two networks compared side by side, kept in a list, each with its optimizer
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 1), torch.randn(64, 1)), batch_size=16, shuffle=True)
nets = [torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)) for _ in range(2)]
opts = [torch.optim.Adam(net.parameters(), lr=0.01) for net in nets]
for epoch in range(3):
    for x, y in loader:
        for net, opt in zip(nets, opts):
            loss = torch.nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
''',
            warnings=('ACC036:6',),
        ),
        Example(  # a solver's builder, called by __init__ and again after training to reload the best weights
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Solver:
    def __init__(self, loader):
        self.loader = loader
        self.build_model()

    def build_model(self):
        self.net = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def train(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        torch.save(self.net.state_dict(), "best.pt")
        self.build_model()
        self.net.load_state_dict(torch.load("best.pt"))


loader = DataLoader(TensorDataset(torch.randn(8, 1), torch.randn(8, 1)), batch_size=4)
Solver(loader).train()
''',
            warnings=('ACC040:21',),
        ),
        Example(  # WGAN-GP's critic: the gradient penalty backwarded on its own, after the two critic terms
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
G = torch.nn.Linear(2, 2)
D = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
d_optimizer = torch.optim.Adam(D.parameters())
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
for (x,) in loader:
    fake = G(torch.randn_like(x)).detach()
    d_optimizer.zero_grad()
    D(fake).mean().backward()
    (-D(x).mean()).backward()
    mixed = (0.5 * x + 0.5 * fake).requires_grad_(True)
    grad = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)[0]
    gradient_penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    gradient_penalty.backward()
    d_optimizer.step()
''',
            warnings=('ACC041:15',),
        ),
        Example(  # the model built in ``__init__``, the optimizer and loader in ``train()``, which runs per epoch
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
class Execute:
    def __init__(self):
        self.model = torch.nn.Linear(2, 1)
    def train(self):
        loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        for x, y in loader:
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            optimizer.step()
execute = Execute()
for epoch in range(3):
    execute.train()
''',
            warnings=('ACC045:6',),
        ),
    )

    def run(self, ctx: Context) -> None:
        refused = [p for p in ctx.plan.problems
                   if p.refuse or (p.kind == found.UNKNOWN_DATA and not walks_no_loader(ctx.facts, ctx.plan, p.node))]
        if refused:
            raise Abort(*(ctx.warning(CODES[p.kind], p.node, **dict(p.fields)) for p in refused))
