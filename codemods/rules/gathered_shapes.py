"""ShapeFromGather: after an evaluation gather, a tensor shaped by the per-process batch size takes its size
from the gathered tensor.

The evaluation rule gathers the outputs and targets of every process right after the forward pass
(``recon, data = accelerator.gather_for_metrics((recon, data))``). A later ``recon.view(args.batch_size, 1, 28,
28)`` (pytorch/examples' VAE) then meets N batches in one tensor, and crashes. The batch dimension becomes
``-1``: the tensor's own number of elements decides it, which on one process is exactly the batch size the
original named (or the original would have failed), and on N processes is the gathered batch.

A loop over the batch's rows sized by the per-process batch (``for i in range(batch_size): class_correct[target[i]]
+= correct[i]``, udacity's CIFAR notebook) would count one process's share of the gathered rows: its bound becomes
the gathered tensor's length (``range(len(target))``).

Left as it is, with ACC033: a shape that already has a ``-1`` elsewhere (``.view(batch_size, -1)``), or given
as one tuple, where the gathered tensor's size is not known to be its first dimension: use
``t.size(0)`` by hand, or shape the tensor before the gather.
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.facts import CallSite, Loop
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_BATCH = re.compile(r"batch|(^|\.)bs$", re.IGNORECASE)
_SHAPERS = ("view", "reshape")


class ShapeFromGather(Rule):
    name = "gathered_shapes"
    description = "Shape tensors gathered for metrics by their own size, not the per-process batch size."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
batch_size = 4
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=batch_size)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    torch.nn.functional.mse_loss(model(x), x).backward()
    optimizer.step()
with torch.no_grad():
    for (x,) in loader:
        recon = model(x)
        images = recon.view(batch_size, 1, 2, 2)
        print(images.shape)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
batch_size = 4
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=batch_size)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for (x,) in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), x))
    optimizer.step()
with torch.no_grad():
    for (x,) in loader:
        recon = model(x)
        recon = accelerator.gather_for_metrics(recon)
        images = recon.view(-1, 1, 2, 2)
        accelerator.print(images.shape)
accelerator.end_training()
''',
        ),
        Example(
            # shaped by its own size already: nothing to change
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
batch_size = 4
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=batch_size)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    torch.nn.functional.mse_loss(model(x), x).backward()
    optimizer.step()
with torch.no_grad():
    for (x,) in loader:
        recon = model(x)
        images = recon.view(recon.size(0), 1, 2, 2)
        print(images.shape)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
batch_size = 4
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=batch_size)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for (x,) in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), x))
    optimizer.step()
with torch.no_grad():
    for (x,) in loader:
        recon = model(x)
        recon = accelerator.gather_for_metrics(recon)
        images = recon.view(recon.size(0), 1, 2, 2)
        accelerator.print(images.shape)
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a -1 is taken already: reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
batch_size = 4
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=batch_size)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    torch.nn.functional.mse_loss(model(x), x).backward()
    optimizer.step()
with torch.no_grad():
    for (x,) in loader:
        recon = model(x)
        flat = recon.view(batch_size, -1)
        print(flat.shape)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
batch_size = 4
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=batch_size)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for (x,) in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), x))
    optimizer.step()
with torch.no_grad():
    for (x,) in loader:
        recon = model(x)
        recon = accelerator.gather_for_metrics(recon)
        flat = recon.view(batch_size, -1)
        accelerator.print(flat.shape)
accelerator.end_training()
''',
            warnings=("ACC033:13",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        agreement = ctx.agreement
        for anchor, names in agreement.gathered.items():
            first = ctx.facts.order[anchor][0] if anchor in agreement.gathered_before else ctx.facts.order[anchor][1] + 1
            self._after(ctx, anchor, first, set(names), edit=True)

    def recheck(self, ctx: Context) -> None:
        """Converted code: a gathered tensor still shaped by the per-process batch size (ACC033)."""
        for site in ctx.facts.calls:
            if site.method == "gather_for_metrics":
                names = _gathered_names(site.stmt, site.node)
                if names:
                    self._after(ctx, site.stmt, ctx.facts.order[site.stmt][1] + 1, names, edit=False)

    def _after(self, ctx: Context, anchor: cst.BaseStatement, first: int, gathered: set[str], *, edit: bool) -> None:
        """The shaped uses of ``gathered`` names in the loop around ``anchor``, from statement order ``first``."""
        loop = _loop_of(ctx, anchor)
        if loop is None:
            return
        for site in sorted(loop.calls, key=lambda s: ctx.facts.order[s.stmt][0]):
            if site.scope is not loop.scope or ctx.facts.order[site.stmt][0] < first:
                continue
            _spread(site, gathered)
            if site.method in _SHAPERS and _on_gathered(ctx, site, gathered):
                self._shape(ctx, loop, site, edit)
        for inner in m.findall(loop.node.body, m.For()):
            assert isinstance(inner, cst.For)
            if ctx.facts.order[inner][0] >= first:
                self._rows(ctx, loop, inner, gathered, edit)

    def _rows(self, ctx: Context, loop: Loop, inner: cst.For, gathered: set[str], edit: bool) -> None:
        """``for i in range(batch_size): ... target[i]`` over gathered rows: bounded by ``len(target)``."""
        bound = _range_bound(inner)
        if bound is None or not isinstance(inner.target, cst.Name) or not _batch_size(ctx, loop, bound):
            return
        index = inner.target.value
        rows = next((root for sub in m.findall(inner.body, m.Subscript())
                     for root in [_root(sub.value)]  # type: ignore[attr-defined]
                     if root in gathered and _indexed_by(sub, index)), None)  # type: ignore[arg-type]
        if rows is None or ctx.rewritten(bound) or ctx.reported(inner.iter):
            return
        if not edit:
            ctx.warn(codes.GATHERED_SHAPE, inner.iter, call="range", size=code_of(bound))
        elif ctx.replace(bound, inner, lambda _: expression(f"len({rows})")):
            ctx.change("walk gathered rows by their own number")

    def _shape(self, ctx: Context, loop: Loop, site: CallSite, edit: bool = True) -> None:
        args = site.node.args
        if not args or args[0].keyword is not None or args[0].star or not _batch_size(ctx, loop, args[0].value):
            return
        if ctx.rewritten(args[0].value) or ctx.reported(site.node):
            return
        if not edit or len(args) == 1 or any(_minus_one(a.value) or a.star for a in args[1:]):
            ctx.warn(codes.GATHERED_SHAPE, site.node, call=code_of(site.node.func), size=code_of(args[0].value))
            return
        if ctx.replace(args[0].value, site.stmt, lambda _: expression("-1")):
            ctx.change("shape gathered tensors by their own size")


def _loop_of(ctx: Context, stmt: cst.BaseStatement) -> Loop | None:
    """The innermost ``for`` loop around ``stmt``."""
    for outer in ctx.facts.chain(stmt)[1:]:
        if isinstance(outer, cst.For):
            return next((lp for lp in ctx.facts.loops if lp.node is outer), None)
    return None


def _spread(site: CallSite, gathered: set[str]) -> None:
    """``images = recon.cpu()`` after the gather: ``images`` holds gathered rows too."""
    stmt = site.stmt
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
        assign = stmt.body[0]
        if _root(assign.value) in gathered and all(isinstance(t.target, cst.Name) for t in assign.targets):
            gathered.update(t.target.value for t in assign.targets)  # type: ignore[attr-defined]


def _root(expr: cst.BaseExpression) -> str | None:
    """``recon`` in ``recon.view(...)[:n].cpu()``."""
    while True:
        if isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            break
    return expr.value if isinstance(expr, cst.Name) else None


def _on_gathered(ctx: Context, site: CallSite, gathered: set[str]) -> bool:
    func = site.node.func
    assert isinstance(func, cst.Attribute)
    receiver = func.value
    if receiver in ctx.agreement.gathered_nodes:
        return True  # ``model(x).view(...)`` where the forward is now the gathered name
    return _root(receiver) in gathered


def _batch_size(ctx: Context, loop: Loop, expr: cst.BaseExpression) -> bool:
    """``args.batch_size``, ``BATCH_SIZE``, ``bs``, or what the loop's loader was given as its batch size."""
    text = code_of(expr)
    if _BATCH.search(text):
        return True
    loader = ctx.plan.loader_of(loop)
    value = loader.value if loader is not None else None
    if isinstance(value, cst.Call):
        given = [a.value for a in value.args if a.keyword is not None and a.keyword.value == "batch_size"]
        given += [a.value for a in value.args[1:2] if a.keyword is None]
        return any(code_of(g) == text for g in given)
    return False


def _gathered_names(stmt: cst.BaseStatement, call: cst.Call) -> set[str]:
    """``x, y = accelerator.gather_for_metrics((x, y))``: the names it binds."""
    if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign) and stmt.body[0].value is call:
        return {n.value for t in stmt.body[0].targets for n in m.findall(t.target, m.Name())}
    return set()


def _range_bound(loop: cst.For) -> cst.BaseExpression | None:
    """``n`` of ``for i in range(n):``."""
    it = loop.iter
    if (isinstance(it, cst.Call) and m.matches(it.func, m.Name("range")) and len(it.args) == 1
            and it.args[0].keyword is None and not it.args[0].star):
        return it.args[0].value
    return None


def _indexed_by(sub: cst.Subscript, index: str) -> bool:
    """``t[i]`` or ``t[i, ...]``: the first index is the loop's variable."""
    first = sub.slice[0].slice if sub.slice else None
    return isinstance(first, cst.Index) and m.matches(first.value, m.Name(index))


def _minus_one(expr: cst.BaseExpression) -> bool:
    return code_of(expr).replace(" ", "") == "-1"
