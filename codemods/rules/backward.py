"""SwapBackward: ``loss.backward()`` -> ``accelerator.backward(loss)``.

``scaler.scale(loss).backward()`` is AMP (left to the AMP warning). Positional arguments take the names
``Tensor.backward`` gives them (WGAN's ``d_loss_real.backward(mone)`` ->
``accelerator.backward(d_loss_real, gradient=mone)``: accelify.runtime and HF Accelerate both hand keywords on to
``loss.backward``); arguments passed by unpacking (``*args``) are warned about.
``self.backward()``, ``super().backward(...)`` and ``torch.autograd.backward(...)`` are no tensor's
``backward`` and stay as they are.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.roles import tensor_backward
from accelify.codemods.engine.rule import Example, Rule


BACKWARD_PARAMETERS = ("gradient", "retain_graph", "create_graph", "inputs")  # ``Tensor.backward``'s, in order


class SwapBackward(Rule):
    name = "backward"
    description = "Run backward through the accelerator."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    (loss / 4).backward(retain_graph=True)
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
    loss = model(x).sum()
    accelerator.backward(loss / 4, retain_graph=True)
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
class Twice(torch.autograd.Function):
    @staticmethod
    def backward(ctx, grad):
        return 2 * grad
for x in torch.ones(4, 2):
    torch.autograd.backward(model(x).sum())
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
class Twice(torch.autograd.Function):
    @staticmethod
    def backward(ctx, grad):
        return 2 * grad
for x in torch.ones(4, 2):
    torch.autograd.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 4)), batch_size=8)
model = torch.nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
weights = torch.tensor([1.0, 0.5, 0.5, 0.1])
for x, y in loader:
    optimizer.zero_grad()
    per_output = ((model(x) - y) ** 2).mean(dim=0)
    per_output.backward(weights)
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator(cpu=True)
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 4)), batch_size=8)
model = torch.nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
weights = torch.tensor([1.0, 0.5, 0.5, 0.1])
for x, y in loader:
    optimizer.zero_grad()
    per_output = ((model(x) - y) ** 2).mean(dim=0)
    accelerator.backward(per_output, gradient=weights)
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
extra = (None, True)
for x in torch.ones(4, 2):
    model(x).sum().backward(*extra)
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
extra = (None, True)
for x in torch.ones(4, 2):
    model(x).sum().backward(*extra)
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC010:6",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.facts.calls:
            if site.method != "backward" or not tensor_backward(site.node, site.scope.imports):
                continue
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None:
                continue  # where threading could not bring the accelerator: the leftovers rule reports it (ACC009)
            positional = [a for a in site.node.args if a.keyword is None]
            if any(a.star for a in site.node.args) or len(positional) > len(BACKWARD_PARAMETERS):
                ctx.warn(codes.BACKWARD_ARGS, site.node)
                continue
            if ctx.replace(site.node, site.stmt, lambda c, a=accelerator: _swap(c, a)):  # type: ignore[misc]
                ctx.change("loss.backward() -> accelerator.backward(loss)")


def _swap(call: cst.CSTNode, accelerator: str) -> cst.CSTNode:
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    loss = call.func.value.with_changes(lpar=[], rpar=[])
    args = [
        arg.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        if arg.keyword is None else arg
        for arg, name in zip(call.args, BACKWARD_PARAMETERS + ("",) * len(call.args))
    ]
    return call.with_changes(
        func=expression(f"{accelerator}.backward"),
        args=[cst.Arg(loss), *args],
    )
