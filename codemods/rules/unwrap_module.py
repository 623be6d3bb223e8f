"""UnwrapModule: ``model.module`` of a prepared model becomes ``accelerator.unwrap_model(model)``.

A script that wrapped its model in ``DataParallel`` or ``DistributedDataParallel`` reaches the model inside
through ``.module`` (to save it, to call its own methods). Once the wrap is gone the prepared model is the
accelerator's: on one process it has no ``.module``, on N processes it is the runtime's wrapper.
``accelerator.unwrap_model(model)`` is the model inside in both cases. Every scope that has the accelerator
once threading has passed it on is converted; elsewhere ``model.module`` stays (the model there is not the
prepared one).
"""

from __future__ import annotations

from accelify.codemods.analysis.snippets import unwrap
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class UnwrapModule(Rule):
    name = "unwrap_module"
    description = "Reach a prepared model's inner module with accelerator.unwrap_model(model) instead of model.module."
    examples = (
        Example(
            before='''\
import torch

def train(model, optimizer):
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
    torch.save(model.module.state_dict(), "net.pt")

def main():
    model = torch.nn.DataParallel(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, optimizer)
''',
            after='''\
import torch
from accelify.runtime import Accelerator

def train(model, optimizer, accelerator):
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "net.pt")

def main():
    accelerator = Accelerator(cpu=True, split_batches=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    train(model, optimizer, accelerator)
    accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
blocks = torch.nn.ModuleDict({"module": torch.nn.Linear(2, 1)})
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    (model(x) + blocks.module(x)).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
blocks = torch.nn.ModuleDict({"module": torch.nn.Linear(2, 1)})
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward((model(x) + blocks.module(x)).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for scope in ctx.facts.scopes:
            accelerator = ctx.accelerator_in(scope)
            if accelerator is None:
                continue
            for node, stmt in scope.attributes:
                if node.attr.value != "module" or ctx.edits.replaced(node) or ctx.plan.model_object(scope, node.value) is None:
                    continue
                if ctx.replace(node, stmt, lambda n, a=accelerator: unwrap(n.value, a)):  # type: ignore[misc,attr-defined]
                    ctx.change("model.module -> accelerator.unwrap_model(model)")
