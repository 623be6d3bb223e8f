"""UnwrapAttributes (``--target accelerate`` only): the script's own methods and attributes of a prepared
model go through ``accelerator.unwrap_model(model)``.

On N processes Hugging Face Accelerate's prepared model is a ``DistributedDataParallel`` wrapper, which
has ``nn.Module``'s methods but not the model's own (``model.decode(z)``, ``policy.saved_log_probs``,
``model.generate(...)``, ``model.fc``): they raise ``AttributeError``. ``accelify.runtime``'s prepared
model forwards them to the module, so the default target leaves them as they are.

A prepared loader's ``loader.sampler`` is the same kind of thing: Hugging Face Accelerate rebuilds the loader
around a sharding batch sampler, and its ``sampler`` becomes a plain sampler over the whole data set, so
``valid_loss / len(valid_loader.sampler)`` of a ``SubsetRandomSampler`` split divides by the data set's size (a
wrong loss even on one process). The script's sampler is ``loader.batch_sampler.sampler`` there; the runtime
keeps ``loader.sampler`` as the script made it.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.roles import MODULE_API
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import unwrap
from accelify.codemods.engine.rule import Example, Rule

class UnwrapAttributes(Rule):
    name = "attributes"
    description = "With --target accelerate, reach a prepared model's own methods and attributes through unwrap_model."
    examples = (
        Example(
            before='''\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x)

    def score(self, x):
        return self(x).sigmoid()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
print(model.score(torch.ones(2)))
''',
            after='''\
import torch
from accelerate import Accelerator


accelerator = Accelerator(cpu=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x)

    def score(self, x):
        return self(x).sigmoid()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.print(accelerator.unwrap_model(model).score(torch.ones(2)))
accelerator.end_training()
''',
            target="accelerate",
        ),
        Example(
            before='''\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x)

    def score(self, x):
        return self(x).sigmoid()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
print(model.score(torch.ones(2)))
''',
            after='''\
import torch
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 1)

    def forward(self, x):
        return self.fc(x)

    def score(self, x):
        return self(x).sigmoid()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.print(model.score(torch.ones(2)))
accelerator.end_training()
''',
            fires=False,  # the default target: the runtime's prepared model forwards `score`
        ),
    )

    def run(self, ctx: Context) -> None:
        if ctx.target != "accelerate":
            return
        for scope in ctx.facts.scopes:
            for node, stmt in scope.attributes:
                if node.attr.value == "sampler" and _prepared_loader(ctx, scope, node.value, stmt):
                    if ctx.replace(node, stmt, lambda n: n.with_changes(value=cst.Attribute(n.value, cst.Name("batch_sampler")))):
                        ctx.change("read a prepared loader's own sampler through its batch sampler")
                    continue
                if node.attr.value in MODULE_API or node.attr.value.startswith("__"):
                    continue
                accelerator = ctx.accelerator_in(scope)
                if accelerator is None or ctx.plan.prepared_model(scope, node.value, stmt) is None:
                    continue
                if ctx.replace(node.value, stmt, lambda n, a=accelerator: unwrap(n, a)):  # type: ignore[misc]
                    ctx.change("reach the model's own methods through accelerator.unwrap_model(model)")


def _prepared_loader(ctx: Context, scope: Scope, expr: cst.BaseExpression, stmt: cst.BaseStatement) -> bool:
    found = ctx.plan.prepared(scope, expr, stmt)
    return found is not None and found.role == "loader"
