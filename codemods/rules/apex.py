"""RemoveApex: NVIDIA apex's mixed precision becomes the accelerator's.

The accelerator gets ``mixed_precision="fp16" if args.fp16 else "no"`` (``analysis/creation.py``: the flag that
guards ``amp.initialize``; apex's O1/O2 levels have no counterpart). This rule removes apex:

- ``from apex import amp`` (also in its ``try: ... except ImportError:`` block) and ``model, optimizer =
  amp.initialize(model, optimizer, opt_level=...)`` go;
- ``if args.fp16: with amp.scale_loss(loss, optimizer) as scaled_loss: scaled_loss.backward() else:
  loss.backward()`` keeps its ``else`` (``accelerator.backward`` scales), and so does ``if args.fp16:
  clip_grad_norm_(amp.master_params(optimizer), ...) else: clip_grad_norm_(model.parameters(), ...)``
  (``accelerator.clip_grad_norm_`` unscales);
- a lone ``with amp.scale_loss(loss, optimizer) as scaled_loss:`` block gives its body, on ``loss``.

Any other use of apex's ``amp`` is left alone (the amp rule reports it, ACC005).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.statement_shapes import is_import
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.engine.rule import Example, Rule

INITIALIZE = "apex.amp.initialize"
SCALE_LOSS = "apex.amp.scale_loss"
MASTER_PARAMS = "apex.amp.master_params"


class RemoveApex(Rule):
    name = "apex"
    description = "Replace NVIDIA apex amp (initialize, scale_loss, master_params) by the accelerator's mixed precision."
    examples = (
        Example(
            before='''\
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--fp16", action="store_true")
args = parser.parse_args()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if args.fp16:
    from apex import amp
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for x in torch.ones(4, 2):
    loss = model(x).sum()
    if args.fp16:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()
    optimizer.step()
''',
            after='''\
import argparse
import torch
from accelify.runtime import Accelerator
parser = argparse.ArgumentParser()
parser.add_argument("--fp16", action="store_true")
args = parser.parse_args()
accelerator = Accelerator(cpu=True, mixed_precision="fp16" if args.fp16 else "no")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
amp = {"enabled": False}
for x in torch.ones(4, 2):
    loss = model(x).sum()
    if amp["enabled"]:
        loss = loss * 2
    loss.backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
amp = {"enabled": False}
for x in torch.ones(4, 2):
    loss = model(x).sum()
    if amp["enabled"]:
        loss = loss * 2
    accelerator.backward(loss)
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(  # master_params outside an fp16 branch: the optimizer's parameters
            before='''
import torch
from apex import amp
model = torch.nn.Linear(2, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
    optimizer.step()
''',
            after='''
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x.to(accelerator.device)), y.to(accelerator.device))
    optimizer.zero_grad()
    accelerator.backward(loss)
    accelerator.clip_grad_norm_((p for group in optimizer.param_groups for p in group["params"]), 1.0)
    optimizer.step()
accelerator.end_training()
''',
        ),
    )

    def run(self, ctx: Context) -> None:
        sites = [s for s in ctx.facts.calls if (s.qualname or "").startswith("apex.amp.")]
        imports = [s for s in ctx.facts.order if _imports_apex(s)]
        if not (sites or imports) or not ctx.accelerating:
            return
        folded: set[int] = set()
        left = False  # an apex call left as it is (reported by the amp rule) keeps the import it needs
        for site in sites:
            if site.qualname == INITIALIZE and _assigns(site):
                ctx.remove(site.stmt)
            elif site.qualname in (SCALE_LOSS, MASTER_PARAMS):
                guard = _apex_branch(ctx, site)
                if guard is not None:
                    if id(guard) not in folded:
                        folded.add(id(guard))
                        ctx.regroup([guard], _else_body)
                elif site.qualname == SCALE_LOSS and isinstance(site.stmt, cst.With) and len(site.stmt.items) == 1:
                    ctx.regroup([site.stmt], _scaled_body)
                elif site.qualname == MASTER_PARAMS and len(site.node.args) == 1 and site.node.args[0].keyword is None:
                    # apex's master parameters are the optimizer's (fp32 under the accelerator's mixed precision)
                    optimizer = code_of(site.node.args[0].value)
                    ctx.replace(site.node, site.stmt, lambda _, o=optimizer: expression(  # type: ignore[misc]
                        f"(p for group in {o}.param_groups for p in group[\"params\"])"))
                else:
                    left = True
                    continue
            else:
                left = left or not ctx.is_skipped(site.stmt)
                continue
            ctx.change("apex amp -> the accelerator's mixed precision")
        if not left:
            for stmt in imports:
                ctx.remove(stmt)


def _imports_apex(stmt: cst.BaseStatement) -> bool:
    if not is_import(stmt):
        return False
    return any(
        (isinstance(n, cst.ImportFrom) and n.module is not None and code_of(n.module).split(".")[0] == "apex")
        or (isinstance(n, cst.Import) and any(code_of(a.name).split(".")[0] == "apex" for a in n.names))
        for n in m.findall(stmt, m.Import() | m.ImportFrom())
    )


def _assigns(site: CallSite) -> bool:
    stmt = site.stmt
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and (
        (isinstance(stmt.body[0], cst.Assign) and stmt.body[0].value is site.node)
        or (isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is site.node)
    )


def _apex_branch(ctx: Context, site: CallSite) -> cst.If | None:
    """The ``if <flag>: <apex> else: <plain>`` around an apex call, whose ``else`` is the plain way."""
    for outer in ctx.facts.chain(site.stmt)[1:]:
        if isinstance(outer, cst.If) and isinstance(outer.orelse, cst.Else) and ctx.facts.top_in(site.stmt, list(outer.body.body)) is not None:  # type: ignore[attr-defined]
            if not any((s.qualname or "").startswith("apex.") for s in ctx.facts.calls if ctx.facts.top_in(s.stmt, list(outer.orelse.body.body))):  # type: ignore[attr-defined]
                return outer
    return None


def _else_body(updated: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    (stmt,) = updated
    assert isinstance(stmt, cst.If) and isinstance(stmt.orelse, cst.Else)
    body = list(stmt.orelse.body.body)  # type: ignore[attr-defined]
    body[0] = body[0].with_changes(leading_lines=[*stmt.leading_lines, *body[0].leading_lines])
    return body


def _scaled_body(updated: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``with amp.scale_loss(loss, opt) as scaled_loss: <body>`` -> ``<body>`` on ``loss``."""
    (stmt,) = updated
    assert isinstance(stmt, cst.With)
    item = stmt.items[0]
    loss = item.item.args[0].value  # type: ignore[attr-defined]
    scaled = item.asname.name.value if item.asname is not None and isinstance(item.asname.name, cst.Name) else None  # type: ignore[union-attr]

    class Rename(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated_name: cst.Name) -> cst.BaseExpression:
            return loss if updated_name.value == scaled else updated_name

    body = [s.visit(Rename()) for s in stmt.body.body]  # type: ignore[attr-defined]
    body[0] = body[0].with_changes(leading_lines=[*stmt.leading_lines, *body[0].leading_lines])
    return body  # type: ignore[return-value]
