"""SwapPrint: ``print(...)`` once the accelerator exists -> ``accelerator.print(...)`` (once per machine).

Prints before the accelerator is created, and in functions that do not have it, stay as they are.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.engine.rule import Example, Rule


class SwapPrint(Rule):
    name = "print"
    description = "Print once per machine with accelerator.print."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch, x in enumerate(torch.ones(4, 2)):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for epoch, x in enumerate(torch.ones(4, 2)):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch

def log(message):
    print(message)

def main():
    log("building")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator

def log(message):
    print(message)

def main():
    accelerator = Accelerator(cpu=True)
    log("building")
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
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if site.qualname != "print" or not isinstance(site.node.func, cst.Name):
                continue
            if site.scope.resolve("print") is not None or not ctx.after_accelerator(site.scope, site.stmt):
                continue
            if _before_exit(ctx, site.stmt):
                continue  # the message of the process that stops (rank 1's would be hidden by accelerator.print)
            accelerator = ctx.accelerator_in(site.scope)
            func = expression(f"{accelerator}.print")
            if ctx.replace(site.node.func, site.stmt, lambda _, f=func: f):  # type: ignore[misc]
                ctx.change("print -> accelerator.print")


_EXITS = ("sys.exit", "exit", "quit", "os._exit")


def _before_exit(ctx: Context, stmt: cst.BaseStatement) -> bool:
    """Whether a later statement of ``stmt``'s block ends the process (``sys.exit(1)``, ``raise``)."""
    parent = ctx.facts.parent_stmt.get(stmt)
    body = getattr(getattr(parent, "body", None), "body", None)
    if not body or stmt not in body:
        return False
    for later in body[list(body).index(stmt) + 1 :]:
        if not isinstance(later, cst.SimpleStatementLine):
            continue
        for small in later.body:
            if isinstance(small, cst.Raise):
                return True
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                site = ctx.facts.sites.get(small.value)
                if site is not None and site.qualname in _EXITS:
                    return True
    return False
