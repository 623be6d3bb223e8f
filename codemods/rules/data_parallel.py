"""RemoveDataParallel: single-machine DataParallel gives way to the processes, with the same global batch.

``nn.DataParallel`` split each batch over the GPUs of one process. The converted script runs one process
per GPU, so the wrapper goes and ``Accelerator(split_batches=True)`` (the accelerator rule adds it) splits
each batch over the processes: the batch size the script sets stays the global one.

- ``model = nn.DataParallel(model)`` (alone, or under ``if torch.cuda.device_count() > 1:``) goes;
- around a model prepare does not receive (a distillation teacher loading weights saved from a DataParallel, keys
  ``module.*``) it stays, on the process's device alone (``device_ids=[accelerator.device]``), and splits no batch;
- ``nn.parallel.data_parallel(module, input, ...)`` (in a ``forward``, behind an ``if input.is_cuda and
  ngpu > 1:``) becomes ``module(input)``, the branch that chose between the two collapsing to it;
- (``model.module`` of a prepared model becomes ``accelerator.unwrap_model(model)``: the ``unwrap_module`` rule);
- (a device that was a string and is now ``accelerator.device`` compares its type: the ``device`` rule).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.distributed import DATA_PARALLEL, data_parallel_sites
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.placed import wraps_unprepared_model
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.analysis.roles import strip_placement
from accelify.codemods.engine.rule import Example, Rule

class RemoveDataParallel(Rule):
    name = "data_parallel"
    description = "Drop DataParallel: one process per GPU, each batch split over them (split_batches=True)."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
device = 'cuda' if torch.cuda.is_available() else 'cpu'
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1).to(device)
if device == 'cuda':
    model = torch.nn.DataParallel(model)
    torch.backends.cudnn.benchmark = True
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x, y = x.to(device), y.to(device)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
torch.save(model.module.state_dict(), "net.pt")
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(split_batches=True)
device = accelerator.device
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
if device.type == 'cuda':
    torch.backends.cudnn.benchmark = True
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.wait_for_everyone()
accelerator.save(accelerator.unwrap_model(model).state_dict(), "net.pt")
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
parallel = torch.cuda.device_count() > 1
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
parallel = torch.cuda.device_count() > 1
for x in torch.ones(4, 2, device=accelerator.device):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in data_parallel_sites(ctx.facts):
            if site.qualname == DATA_PARALLEL:
                self._wrapper(ctx, site)
            else:
                self._functional(ctx, site)

    def _wrapper(self, ctx: Context, site: CallSite) -> None:
        """``model = nn.DataParallel(model)`` goes (the model it wraps is the one prepared)."""
        stmt = site.stmt
        if self._pinned(ctx, site):
            return
        if (
            isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
            and strip_placement(stmt.body[0].value) is site.node and site.node.args  # also `DataParallel(model).cuda()`
            and code_of(stmt.body[0].targets[0].target) == code_of(site.node.args[0].value)
        ):
            ctx.remove(stmt)
            ctx.change("DataParallel -> one process per GPU (split_batches=True)")
        else:  # `self.net = DataParallel(Net())` and the like: keep the module, drop the wrapper
            inner = site.node.args[0].value if site.node.args else None
            if inner is not None:
                ctx.replace(site.node, stmt, lambda _, i=inner: i)  # type: ignore[misc]
                ctx.change("DataParallel -> one process per GPU (split_batches=True)")

    def _pinned(self, ctx: Context, site: CallSite) -> bool:
        """``teacher = nn.DataParallel(teacher).cuda()`` wrapping a model prepare does not receive (a distillation
        teacher that loads weights saved from a DataParallel, keys ``module.*``): the wrapper stays, on the process's
        device alone (``device_ids=[accelerator.device]``), so the keys still match and no process reaches into the
        other processes' GPUs. Whether it did."""
        if not wraps_unprepared_model(ctx.plan, site):
            return False
        accelerator = ctx.accelerator_in(site.scope)
        if accelerator is None or not ctx.after_accelerator(site.scope, site.stmt):
            return False
        device = cst.parse_expression(f"[{accelerator}.device]")
        arg = cst.Arg(device, keyword=cst.Name("device_ids"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        ctx.replace(site.node, site.stmt, lambda node: node.with_changes(args=[*node.args, arg]))  # type: ignore[attr-defined]
        ctx.change("DataParallel of a model prepare does not receive: on the process's device alone")
        return True

    def _functional(self, ctx: Context, site: CallSite) -> None:
        """``data_parallel(self.main, input, range(ngpu))`` -> ``self.main(input)``; an ``if``/``else`` that chose
        between it and the plain call collapses to the plain call."""
        if len(site.node.args) < 2:
            return
        module, inputs = site.node.args[0].value, site.node.args[1].value
        guard = ctx.facts.parent_stmt.get(site.stmt)
        if isinstance(guard, cst.If) and isinstance(guard.orelse, cst.Else) and _single(guard.body) is site.stmt:
            plain = _single(guard.orelse.body)
            if plain is not None and code_of(plain).strip() == code_of(site.stmt).replace(code_of(site.node), f"{code_of(module)}({code_of(inputs)})").strip():
                ctx.replace(guard, guard, lambda g: _else_branch(g))
                ctx.change("data_parallel(module, input) -> module(input)")
                return
        call = cst.Call(func=module, args=[cst.Arg(inputs)])
        ctx.replace(site.node, site.stmt, lambda _, c=call: c)  # type: ignore[misc]
        ctx.change("data_parallel(module, input) -> module(input)")


def _single(block: cst.BaseSuite) -> cst.BaseStatement | None:
    return block.body[0] if isinstance(block, cst.IndentedBlock) and len(block.body) == 1 else None


def _else_branch(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.If) and isinstance(node.orelse, cst.Else)
    inner = node.orelse.body.body[0]  # type: ignore[union-attr]
    return inner.with_changes(leading_lines=[*node.leading_lines, *inner.leading_lines])
