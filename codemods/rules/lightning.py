"""RefuseLightning: a program PyTorch Lightning trains is left to Lightning (ACC055).

A ``LightningModule`` (``pytorch_lightning``, ``lightning.pytorch`` or ``lightning``) holds its own
``training_step`` and ``configure_optimizers``; ``Trainer(...).fit(...)`` runs the loop, the backward and the
optimizer steps, and distributes them itself (``Trainer(accelerator="gpu", devices=N, strategy="ddp")``). An
accelerator created in the module's hooks would run inside Lightning's own processes, wrap an optimizer for a model
Lightning already wraps, and shard nothing Lightning does not. The program is refused, naming what trains it: the
``Trainer`` (or ``LightningCLI``) call, else the ``LightningModule`` subclass (a trainer the program gets from a
helper, ``make_trainer(cfg).fit(model)``, or a script that only evaluates the module: its ``configure_optimizers``
would otherwise be taken for a training, an accelerator made in it). A ``LightningModule`` trained by a loop the
program writes (its own ``backward``) is an ``nn.Module`` like any other: converted.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_PACKAGES = ("pytorch_lightning.", "lightning.")
_TRAINERS = ("Trainer", "LightningCLI")


class RefuseLightning(Rule):
    name = "lightning"
    description = "Leave a PyTorch Lightning program to Lightning, which distributes it itself (refused, with its own settings)."
    examples = (
        Example(
            before='''\
import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset
class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.fc(x), y)
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
trainer = pl.Trainer(max_epochs=2, accelerator="gpu", devices=-1)
trainer.fit(Net(), loader)
''',
            warnings=("ACC055:14",),
        ),
        Example(
            before='''\
import torch
from lightning.pytorch import LightningModule
class Net(LightningModule):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.fc(x)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 4):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from lightning.pytorch import LightningModule
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
class Net(LightningModule):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.fc(x)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 4):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            qualname = site.qualname or ""
            if qualname.startswith(_PACKAGES) and qualname.rsplit(".", 1)[-1] in _TRAINERS:
                ctx.abort(codes.LIGHTNING, site.stmt, name=f"{code_of(site.node.func)}(...)")
        if any(site.method == "backward" for site in ctx.facts.calls):
            return  # a LightningModule trained by the program's own loop: a module like any other
        for scope in ctx.facts.scopes:
            key = scope.name if scope.unit == "__main__" else f"{scope.unit}.{scope.name}"
            if scope.kind == "class" and isinstance(scope.node, cst.ClassDef) and _lightning_module(key, ctx.facts.classes):
                ctx.abort(codes.LIGHTNING, scope.node, name=f"class {scope.name}(LightningModule)")


def _lightning_module(name: str, classes: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> bool:
    """Whether the class ``name`` of the program subclasses a ``LightningModule``, itself or through its bases."""
    if name in seen or name not in classes:
        return False
    for base in classes[name]:
        if base.startswith(_PACKAGES) and base.endswith(".LightningModule"):
            return True
        if _lightning_module(base, classes, seen | {name}):
            return True
    return False
