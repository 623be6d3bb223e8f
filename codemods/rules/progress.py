"""DisableProgress: progress bars only on the local main process.

A bar that already sets ``disable=`` is left alone.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.engine.rule import Example, Rule

# bars that take ``disable=`` (rich's ``track`` and alive-progress's ``alive_it`` too)
BARS = {"tqdm.tqdm", "tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange", "rich.progress.track",
        "alive_progress.alive_it"}


class DisableProgress(Rule):
    name = "progress"
    description = "Show progress bars (tqdm, rich's track, alive_it) on the local main process only."
    examples = (
        Example(
            before='''\
import torch
from tqdm import tqdm
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in tqdm(loader, desc="train"):
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from tqdm import tqdm
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in tqdm(loader, desc="train", disable=not accelerator.is_local_main_process):
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from tqdm import tqdm
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in tqdm(loader, disable=True):
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from tqdm import tqdm
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in tqdm(loader, disable=True):
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if site.qualname not in BARS or not ctx.after_accelerator(site.scope, site.stmt):
                continue
            if any(a.keyword is not None and a.keyword.value == "disable" for a in site.node.args):
                continue
            if any(a.star == "**" for a in site.node.args):
                continue
            if ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope):
                continue  # only the main process runs it (evaluation under the script's own rank test)
            accelerator = ctx.accelerator_in(site.scope)
            if ctx.replace(site.node, site.stmt, lambda c, a=accelerator: _disable(c, a)):  # type: ignore[misc]
                ctx.change("show progress bars on the local main process only")


def _disable(call: cst.CSTNode, accelerator: str) -> cst.CSTNode:
    assert isinstance(call, cst.Call)
    arg = cst.Arg(
        expression(f"not {accelerator}.is_local_main_process"),
        keyword=cst.Name("disable"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if args and args[-1].comma != cst.MaybeSentinel.DEFAULT:
        # keep a magic trailing comma after the new argument
        arg = arg.with_changes(comma=args[-1].comma)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, arg])
