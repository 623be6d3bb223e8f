"""AddAcceleratorImport: ``from accelify.runtime import Accelerator`` (or ``from accelerate import
Accelerator`` with ``--target accelerate``) after the last top-level import, once an accelerator is created.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.import_time import EntryLevel
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


def schedule_import(ctx: Context, module: str, name: str, *more: str) -> None:
    """A ``from module import name[, more...]`` at the top of the home's module (``Context.add_import``)."""
    home = ctx.plan.home
    names = [cst.ImportAlias(cst.Name(n), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for n in (name, *more)]
    names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    new = cst.SimpleStatementLine(
        [cst.ImportFrom(module=cst.parse_expression(module), names=names)]  # type: ignore[arg-type]
    )
    ctx.add_import((ctx.facts.unit_of(home) if home is not None else ctx.facts).module, new, first=True)


class AddAcceleratorImport(Rule):
    name = "imports"
    description = "Import Accelerator from the target library."
    examples = (
        Example(
            before='''\
import torch
from tqdm import tqdm
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in tqdm(torch.ones(4, 2)):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from tqdm import tqdm
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in tqdm(torch.ones(4, 2), disable=not accelerator.is_local_main_process):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if ctx.accelerating:
            creation = ctx.plan.analysis(Creation)
            entry = ctx.plan.analysis(EntryLevel)  # the top level's prints and figures through ``PartialState``
            state = ("PartialState",) if entry.state_used and entry.home is not None and entry.home.unit == "__main__" \
                and not ctx.notebook else ()
            schedule_import(ctx, ctx.import_module, "Accelerator", *creation.runtime_imports, *state)
            ctx.change(f"import Accelerator from {ctx.import_module}")
