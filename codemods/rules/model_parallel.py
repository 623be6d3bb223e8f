"""RefuseModelParallel: a model split across devices by hand is refused (ACC023).

Model parallelism by hand puts the halves of one ``nn.Module`` on different devices
(``self.seq1 = ....to("cuda:0")``, ``self.seq2 = ....to("cuda:1")``) and moves the activations between
them in ``forward``. ``accelerator.prepare`` places a model on this process's one device and wraps it
for that device: both halves would land on one GPU (the split exists because they do not fit) while
``forward`` still sends activations to the other. The file is left unchanged, pointing at the first
submodule placed on a device other than the first one's.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import PLACEMENT_METHODS, is_module_class
from accelify.codemods.engine.rule import Example, Rule


class RefuseModelParallel(Rule):
    name = "model_parallel"
    description = "Refuse a model whose submodules are placed on different devices by hand (model parallelism)."
    examples = (
        Example(
            before='''\
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2).to("cuda:0")
        self.b = nn.Linear(2, 1).to("cuda:1")
    def forward(self, x):
        return self.b(self.a(x.to("cuda:0")).to("cuda:1"))
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            warnings=("ACC023:7",),
        ),
        Example(
            before='''\
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 1)
        self.scale = torch.ones(1).to("cpu")
    def forward(self, x):
        return self.b(self.a(x)) * self.scale
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
import torch.nn as nn
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 1)
        self.scale = torch.ones(1).to("cpu")
    def forward(self, x):
        return self.b(self.a(x)) * self.scale
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for scope in ctx.facts.scopes:
            if scope.kind == "class" and _is_module(ctx, scope):
                split = _second_device(ctx, scope)
                if split is not None:
                    ctx.abort(codes.MODEL_PARALLEL, split.stmt)


def _is_module(ctx: Context, cls: Scope) -> bool:
    qualname = cls.imports.qualname(cst.Name(cls.name)) or cls.name
    return is_module_class(qualname, ctx.facts.classes) or is_module_class(cls.name, ctx.facts.classes)


def _second_device(ctx: Context, cls: Scope) -> CallSite | None:
    """The first ``self.x = <module>.to(d)`` of the class's methods whose device differs from an earlier one's."""
    first: str | None = None
    for site in ctx.facts.calls:
        if site.method not in PLACEMENT_METHODS or site.scope.class_scope is not cls or not site.node.args:
            continue
        stmt = site.stmt
        if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign)):
            continue
        target = stmt.body[0].targets[0].target
        if stmt.body[0].value is not site.node or not (dotted(target) or "").startswith("self."):
            continue
        device = code_of(site.node.args[0].value)
        if first is None:
            first = device
        elif device != first:
            return site
    return None
