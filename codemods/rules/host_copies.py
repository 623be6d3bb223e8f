"""HostCopies: ``.numpy()`` of a batch value a prepared loader yields reads ``.cpu().numpy()``.

A prepared data loader hands every batch over on the process's device (``accelerator.device``). The original's
batches came from a plain loader, on the CPU: a value it never moved could be turned into a NumPy array as it is
(``trues.extend(yb.numpy().tolist())``, only the inputs sent to the GPU: set U's U9). On a GPU that raises ("can't
convert cuda:0 device type tensor to numpy"). ``.numpy()`` of a value of the loop's batch (its loop variables, and
what the evaluation rule gathers from them) reads ``.cpu().numpy()``: the same array, from wherever the tensor is
(a tensor already on the CPU is not copied).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class HostCopies(Rule):
    name = "host_copies"
    description = "Read .cpu().numpy() of a batch value a prepared loader puts on the device."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
device = "cuda" if torch.cuda.is_available() else "cpu"
loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,))), batch_size=8)
model = torch.nn.Linear(3, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:
    xb = xb.to(device)
    loss = torch.nn.functional.cross_entropy(model(xb), yb.to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(yb.numpy().tolist())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
device = accelerator.device
loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,))), batch_size=8)
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
for xb, yb in loader:
    loss = torch.nn.functional.cross_entropy(model(xb), yb.to(device))
    opt.zero_grad()
    accelerator.backward(loss)
    opt.step()
    accelerator.print(yb.cpu().numpy().tolist())
accelerator.end_training()
''',
        ),
        Example(
            # already ``.cpu()`` before ``.numpy()``: nothing to add
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,))), batch_size=8)
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(yb.cpu().numpy().sum())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,))), batch_size=8)
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
for xb, yb in loader:
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    accelerator.backward(loss)
    opt.step()
    accelerator.print(yb.cpu().numpy().sum())
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        agreement = ctx.agreement
        for loop in ctx.facts.loops:
            if ctx.plan.loader_of(loop) is None:
                continue
            batch = set(loop.targets)
            for stmt in loop.stmts:
                if agreement.gathers(stmt):
                    batch |= agreement.gathered[stmt]
            for site in loop.calls:
                func = site.node.func
                if site.method != "numpy" or site.node.args or not isinstance(func, cst.Attribute):
                    continue
                if not (isinstance(func.value, cst.Name) and func.value.value in batch) or ctx.rewritten(func.value):
                    continue  # (``x.cpu().numpy()``, ``out.detach().numpy()`` of an output: the original's own)
                if ctx.replace(func.value, site.stmt, lambda n: cst.Call(func=cst.Attribute(value=n, attr=cst.Name("cpu")))):
                    ctx.change("read .cpu().numpy() of a batch value (a prepared loader puts it on the device)")
