"""WarnMixedLoaders: a loop over a loader its function is handed prepared at one call and unprepared at another is
reported (ACC066).

``evaluate(self, val_loader)`` called by the trainer's ``train()`` with the loader prepared there, and by the script
after training with the loader as it made it (set V's V6): its validation loss is one process's share during training
(and an early stop on it is decided by each process alone), while the final call walks the whole set on every
process. A gather would count the whole set N times at the final call, so neither is done: the user chooses
(``analysis/mixed_calls.py``). Where the unprepared loader is handed over by the scope that built it (the script's
``evaluate(val_loader)`` after ``train(train_loader, val_loader)``, or its test loader), the prepared one is left out of
``prepare`` instead (``DataPasses._walked_whole_elsewhere``) and nothing is mixed; what is left is a loader handed on
through another function.
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.analysis.mixed_calls import mixed_loader
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class WarnMixedLoaders(Rule):
    name = "mixed_loaders"
    description = "Report a loop over a loader prepared at one call of its function and not at another."
    examples = (
        Example(
            # the last call is made by a function handed the loader: the loader it walks is not followed there
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x), y).item()
    return total / len(loader)


def train(model, train_loader, val_loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(evaluate(model, val_loader))


def report(model, loader):
    print(evaluate(model, loader))


model = torch.nn.Linear(4, 1)
train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
train(model, train_loader, val_loader)
report(model, test_loader)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x), y).item()
    return total / len(loader)


def train(model, train_loader, val_loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, train_loader, val_loader = accelerator.prepare(
        model, opt, train_loader, val_loader
    )
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
    accelerator.print(evaluate(model, val_loader))


def report(model, loader):
    accelerator.print(evaluate(model, loader))


model = torch.nn.Linear(4, 1)
train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
test_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
train(model, train_loader, val_loader)
report(model, test_loader)
accelerator.end_training()
''',
            warnings=("ACC066:8",),
        ),
        Example(
            # the script that built the loader walks it too: left out of ``prepare`` (``analysis/data_passes.py``),
            # every process walks all of it at both calls, as the original did; nothing reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x), y).item()
    return total / len(loader)


def train(model, train_loader, val_loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(evaluate(model, val_loader))


model = torch.nn.Linear(4, 1)
train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
train(model, train_loader, val_loader)
print(evaluate(model, val_loader))
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x), y).item()
    return total / len(loader)


def train(model, train_loader, val_loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, train_loader = accelerator.prepare(model, opt, train_loader)
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
    accelerator.print(evaluate(model, val_loader))


model = torch.nn.Linear(4, 1)
train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
train(model, train_loader, val_loader)
accelerator.print(evaluate(model, val_loader))
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # every call hands it the prepared loader: gathered (rules/evaluation.py), nothing reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += torch.nn.functional.mse_loss(model(x), y).item()
    return total / len(loader)


def train(model, train_loader, val_loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(evaluate(model, val_loader))


model = torch.nn.Linear(4, 1)
train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
train(model, train_loader, val_loader)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            output = model(x)
            output, y = accelerator.gather_for_metrics((output, y))
            for output, y in zip(output.split(loader.batch_sampler.batch_size), y.split(loader.batch_sampler.batch_size)):
                total += torch.nn.functional.mse_loss(output, y).item()
    return total / len(loader.batch_sampler.batch_sampler)


def train(model, train_loader, val_loader):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, train_loader, val_loader = accelerator.prepare(
        model, opt, train_loader, val_loader
    )
    for x, y in train_loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
    accelerator.print(evaluate(model, val_loader))


model = torch.nn.Linear(4, 1)
train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
train(model, train_loader, val_loader)
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for loop in ctx.facts.loops:
            if ctx.plan.loader_of(loop) is not None or ctx.is_skipped(loop.node):
                continue
            found = mixed_loader(ctx.plan, loop)
            if found is None:
                continue
            ctx.warn(codes.MIXED_LOADER, loop.node, function=loop.scope.name, name=found.param,
                     prepared=_caller(found.prepared.scope), unprepared=_caller(found.unprepared.scope))


def _caller(scope) -> str:  # noqa: ANN001 - a Scope
    """```train``` for a call in ``train()``, ``the script`` for one at a module's top level."""
    return "the script" if scope.kind == "module" else f"`{scope.name}`"
