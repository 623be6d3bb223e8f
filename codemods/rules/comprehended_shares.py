"""WarnComprehendedShares: a comprehension that runs a prepared model over a prepared loader is this process's share.

``torch.stack([F.mse_loss(model(x), y) for x, y in val_loader]).mean()`` and the course layout's ``outputs =
[model.validation_step(batch) for batch in val_loader]`` evaluate over a prepared loader, which gives each process
1/N of the batches: the mean, accuracy or list computed from them is one process's share, printed by process 0 as
if it were the whole set's. The evaluation rule gathers a ``for`` loop's outputs batch by batch; a comprehension has no
statement to gather in, so it is reported (and left as it is) rather than converted silently wrong.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.share_walks import is_prepared_loader
from accelify.codemods.analysis.statement_shapes import comprehension_fors
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_COMPREHENSIONS = m.ListComp() | m.GeneratorExp() | m.SetComp() | m.DictComp()
SHOWN = 60  # characters of the comprehension quoted in the warning


class WarnComprehendedShares(Rule):
    name = "comprehended_shares"
    description = "Report a comprehension that runs a prepared model over a prepared loader: its values are this process's share."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
print(torch.stack([torch.nn.functional.mse_loss(model(x), y) for x, y in val_loader]).mean())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader, val_loader = accelerator.prepare(
    model, optimizer, loader, val_loader
)
for x, y in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.print(torch.stack([torch.nn.functional.mse_loss(model(x), y) for x, y in val_loader]).mean())
accelerator.end_training()
''',
            warnings=("ACC050:10",),
        ),
        Example(
            # a comprehension over a batch's parts, not over the loader
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    outs = [model(part) for part in x.split(2)]
    torch.nn.functional.mse_loss(torch.cat(outs), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    outs = [model(part) for part in x.split(2)]
    accelerator.backward(torch.nn.functional.mse_loss(torch.cat(outs), y))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        seen: set[int] = set()
        found: dict[int, list[cst.CSTNode]] = {}  # the comprehensions of each statement, walked once
        for site in ctx.facts.calls:
            comps = found.setdefault(id(site.stmt), m.findall(site.stmt, _COMPREHENSIONS))
            for comp in comps:
                assert isinstance(comp, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp))
                if id(comp) in seen or not _inside(site.node, comp) or not _runs_prepared_model(ctx, site):
                    continue
                if any(is_prepared_loader(ctx.plan, site.scope, f.iter, site.stmt) for f in comprehension_fors(comp.for_in)):
                    seen.add(id(comp))
                    code = code_of(comp)
                    name = code if len(code) <= SHOWN else code[:SHOWN - 3] + "..."
                    ctx.warn(codes.COMPREHENDED_SHARE, comp, name=name)


def _inside(call: cst.Call, comp: cst.CSTNode) -> bool:
    element = [comp.key, comp.value] if isinstance(comp, cst.DictComp) else [comp.elt]  # type: ignore[union-attr]
    return any(found is call for part in element for found in m.findall(part, m.Call()))


def _runs_prepared_model(ctx: Context, site: CallSite) -> bool:
    """``model(x)`` or ``model.validation_step(batch)`` on a prepared model."""
    func = site.node.func
    held = func.value if isinstance(func, cst.Attribute) else func
    return ctx.plan.prepared_model(site.scope, held, site.stmt) is not None
