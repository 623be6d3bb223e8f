"""RefuseForwardMethods: training through a model method that calls the model's own forward is refused (ACC025).

Research code often computes the loss in a method of the model: ``loss = model.training_step(batch)``,
``model.p_losses(x, t)``, with ``self(x)`` or ``self.forward(x)`` inside. ``accelerator.prepare`` wraps the
model in ``DistributedDataParallel``, and only a call of the wrapper (``model(x)``) sets up the gradient
all-reduce; reached through the wrapper, the method runs on the inner module, its ``self(x)`` skips DDP, and
each process silently trains its own copy (Hugging Face Accelerate's wrapper has no such method at all).
Neither target has a way to send such a method through the wrapper, so the file is refused, pointing at
the call. Methods used without gradients (``model.generate(...)`` under ``no_grad``, evaluation) and
methods that do not run the forward (``model.decode(z)``) are left to the other rules.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import CallSite, Facts
from accelify.codemods.analysis.roles import MODULE_API
from accelify.codemods.engine.rule import Example, Rule


class RefuseForwardMethods(Rule):
    name = "forward_methods"
    description = "Refuse training through a model method that runs the model's forward itself (it would bypass DDP)."
    examples = (
        Example(
            before='''\
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        return self.fc(x)
    def training_step(self, x):
        return self(x).pow(2).mean()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model.training_step(x)
    loss.backward()
    optimizer.step()
''',
            warnings=("ACC025:14",),
        ),
        Example(
            # a method that does not run the forward, and one that does but under no_grad: converted
            before='''\
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        return self.fc(x)
    def penalty(self):
        return self.fc.weight.pow(2).sum()
    def predict(self, x):
        return self(x).round()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model(x).sum() + model.penalty()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        print(model.predict(x))
''',
            after='''\
import torch
import torch.nn as nn
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        return self.fc(x)
    def penalty(self):
        return self.fc.weight.pow(2).sum()
    def predict(self, x):
        return self(x).round()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    loss = model(x).sum() + model.penalty()
    accelerator.backward(loss)
    optimizer.step()
    with torch.no_grad():
        accelerator.print(model.predict(x))
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        methods = _forward_methods(ctx.facts)
        if not methods:
            return
        for site in ctx.facts.calls:
            if site.method not in methods or site.no_grad or not isinstance(site.node.func, cst.Attribute):
                continue
            if ctx.plan.prepared_model(site.scope, site.node.func.value, site.stmt) is None or not _trains(ctx, site):
                continue
            ctx.abort(codes.FORWARD_METHOD, site.node, call=f"{code_of(site.node.func)}(...)")


def _forward_methods(facts: Facts) -> set[str]:
    """Names of methods (other than ``forward`` and nn.Module's own) of classes in the program that call
    ``self(...)``, ``self.forward(...)`` or another such method of ``self``."""
    methods = [
        s for s in facts.scopes
        if s.kind == "function" and s.parent is not None and s.parent.kind == "class"
        and s.name not in MODULE_API and not s.name.startswith("__") and not s.no_grad  # @torch.no_grad(): no gradients
    ]
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for method in methods:
            if method.name not in found and any(_runs_forward(site, found) for site in method.calls):
                found.add(method.name)
                changed = True
    return found


def _runs_forward(site: CallSite, found: set[str]) -> bool:
    func = site.node.func
    if isinstance(func, cst.Name):
        return func.value == "self"
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and (func.attr.value in ("forward", "__call__") or func.attr.value in found)
    )


def _trains(ctx: Context, site: CallSite) -> bool:
    """The call is made where training happens: its own loop (not a loop nested in it), or its function
    outside loops, calls backward."""
    around: list[CallSite] = site.loop.calls if site.loop is not None else site.scope.calls
    return any(other.loop is site.loop and ctx.plan.reaches_backward(other) for other in around)



