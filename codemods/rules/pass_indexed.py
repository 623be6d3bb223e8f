"""WarnPassIndexed: an evaluation loop over a sharded loader that pairs a list of its own with each batch by the
loop's index is reported (ACC065).

``for index, (data, label) in enumerate(test_loader): ... names[index] + "," + classes[prediction]`` (set U's U1: a
speech-commands test set walked one file at a time, each prediction written beside its file's name): the original's
index is the batch's place in the data set. Prepared, the loader hands each process its own batches and the loop
counts them from 0 on every process, so ``names[index]`` is another batch's name (and after the evaluation's gather a
pass holds N batches). What the user wants is one of two: the whole test set walked by every process (the loader left
out of ``prepare``, the writes on the main process), or the name carried in the data set's items. Only evaluation
loops (nothing in them reaches a backward); the list indexed is one the loop does not bind.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.pass_index import indexed_subscript
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class WarnPassIndexed(Rule):
    name = "pass_indexed"
    description = "Report a list paired with a sharded evaluation loader's batches by the loop's index."
    examples = (
        Example(
            # a function walking two loaders (validation and test), each prepared: reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
names = [f"{i}.wav" for i in range(6)]
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
val_loader = DataLoader(TensorDataset(torch.randn(6, 4)))
test_loader = DataLoader(TensorDataset(torch.randn(6, 4)))
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def predict(loader):
    with torch.no_grad():
        for index, (x,) in enumerate(loader):
            print(names[index], model(x).argmax(1).item())


for x, y in train_loader:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
predict(val_loader)
predict(test_loader)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
names = [f"{i}.wav" for i in range(6)]
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
val_loader = DataLoader(TensorDataset(torch.randn(6, 4)))
test_loader = DataLoader(TensorDataset(torch.randn(6, 4)))
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, train_loader, val_loader, test_loader = accelerator.prepare(
    model, opt, train_loader, val_loader, test_loader
)


def predict(loader):
    with torch.no_grad():
        for index, (x,) in enumerate(loader):
            output = model(x)
            output = accelerator.gather_for_metrics(output)
            accelerator.print(names[index], output.argmax(1).item())


for x, y in train_loader:
    opt.zero_grad()
    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
    opt.step()
predict(val_loader)
predict(test_loader)
accelerator.end_training()
''',
            warnings=("ACC065:14",),
        ),
        Example(
            # an evaluation loader walked by such a loop alone is left out of prepare (analysis/data_passes.py):
            # every process walks it whole, as the original did, and prints each line once
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
names = [f"{i}.wav" for i in range(6)]
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
test_loader = DataLoader(TensorDataset(torch.randn(6, 4)))
model = torch.nn.Linear(4, 3).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in train_loader:
    x, y = x.to(device), y.to(device)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
with torch.no_grad():
    for index, (x,) in enumerate(test_loader):
        print(names[index], model(x.to(device)).argmax(1).item())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
device = accelerator.device
names = [f"{i}.wav" for i in range(6)]
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
test_loader = DataLoader(TensorDataset(torch.randn(6, 4)))
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, train_loader = accelerator.prepare(model, opt, train_loader)
for x, y in train_loader:
    opt.zero_grad()
    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
    opt.step()
with torch.no_grad():
    for index, (x,) in enumerate(test_loader):
        accelerator.print(names[index], model(x.to(device)).argmax(1).item())
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # the index of the batch's own rows (``probs[index]`` of a tensor the loop computes) is the batch's
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for index, (x, y) in enumerate(train_loader):
    opt.zero_grad()
    out = model(x)
    torch.nn.functional.cross_entropy(out, y).backward()
    opt.step()
    if index % 2 == 0:
        print(out[index % 8].sum().item())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, train_loader = accelerator.prepare(model, opt, train_loader)
for index, (x, y) in enumerate(train_loader):
    opt.zero_grad()
    out = model(x)
    accelerator.backward(torch.nn.functional.cross_entropy(out, y))
    opt.step()
    if index % 2 == 0:
        accelerator.print(out[index % 8].sum().item())
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        plan = ctx.plan
        for loop in ctx.facts.loops:
            if not isinstance(loop.node, cst.For) or plan.loader_of(loop) is None or plan.never_run(loop.scope):
                continue
            if any(plan.reaches_backward(site) for site in loop.calls):
                continue  # a training loop: its index counts steps
            found = indexed_subscript(loop)
            if found is not None:
                sub, held, index = found
                ctx.warn(codes.PASS_INDEXED, sub, expr=code_of(sub), name=held, index=index,
                         loader=code_of(loop.node.iter.args[0].value))  # type: ignore[attr-defined]
