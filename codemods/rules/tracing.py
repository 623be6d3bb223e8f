"""TraceUnwrapped: tracing, exporting or summarising a prepared model takes the unwrapped model, on the main process.

``writer.add_graph(model, x)``, ``torch.jit.trace(model, x)``, ``torch.onnx.export(model, x, path)`` and
``torchinfo.summary(model, ...)`` run the model's forward outside training: through the DistributedDataParallel
wrapper they trace the wrapper (or crash on it), and on N processes they export the same file N times. The model
goes through ``accelerator.unwrap_model(...)``; a call that is a statement of its own runs under ``if
accelerator.is_main_process:`` (a call whose result is kept, ``traced = torch.jit.trace(...)``, runs on every
process: each needs the result; its ``traced.save(path)`` runs on the main process). Code the script already runs on the main process alone is only unwrapped.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.handle_uses import alone
from accelify.codemods.analysis.snippets import expression, on_main_process, unwrap
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

TRACERS = {
    "torch.jit.trace",
    "torch.jit.script",
    "torch.onnx.export",
    "torch.export.export",
    "torchinfo.summary",
    "torchsummary.summary",
}
_METHODS = ("add_graph",)  # ``SummaryWriter.add_graph(model, input)``


class TraceUnwrapped(Rule):
    name = "tracing"
    description = "Trace, export or summarise the unwrapped model, on the main process."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
torch.onnx.export(model, x, "model.onnx")
traced = torch.jit.trace(model, x)
traced.save("traced.pt")
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
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
if accelerator.is_main_process:
    torch.onnx.export(accelerator.unwrap_model(model), x, "model.onnx")
traced = torch.jit.trace(accelerator.unwrap_model(model), x)
if accelerator.is_main_process:
    traced.save("traced.pt")
accelerator.end_training()
''',
        ),
        Example(
            # before prepare: the model is still the plain module
            before='''\
import torch
model = torch.nn.Linear(2, 1)
traced = torch.jit.trace(model, torch.ones(1, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
traced = torch.jit.trace(model, torch.ones(1, 2))
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
        plan = ctx.plan
        for site in ctx.facts.calls:
            if not _traces(site):
                continue
            model = _model_argument(site)
            if model is None:
                continue
            if plan.prepared_model(site.scope, model, site.stmt) is None:
                self._before_prepare(ctx, site)  # (``summary(model.cuda(), ...)``: the placement rule drops ``.cuda()``)
                continue
            if ctx.rewritten(model):
                continue
            if not ctx.replace_through(site.scope, model, site.stmt, lambda n, a: unwrap(n, a)):
                continue
            ctx.change("trace the unwrapped model")
            stmt = site.stmt
            if plan.distributed.main_only(ctx.facts, stmt, site.scope) is not None:
                continue
            if alone(site) and not ctx.rewritten(stmt):
                ctx.replace_through(site.scope, stmt, stmt, on_main_process)
                ctx.change("trace on the main process only")
            for save in _saves_of(ctx, site):  # ``traced.save(path)``: written once
                if not ctx.rewritten(save):
                    ctx.replace_through(site.scope, save, save, on_main_process)


    def _before_prepare(self, ctx: Context, site: CallSite) -> None:
        """``summary(model, (3, 32, 32))`` of the model before ``prepare`` wraps it, a statement of its own once the
        accelerator exists: nothing to unwrap, but its table (or file) comes once, from the main process."""
        stmt = site.stmt
        accelerator = ctx.accelerator_in(site.scope)
        if not alone(site) or accelerator is None or not ctx.after_accelerator(site.scope, stmt) \
                or ctx.rewritten(stmt) or ctx.plan.distributed.main_only(ctx.facts, stmt, site.scope) is not None:
            return
        if not any(o.role == "model" for o in ctx.plan.objects):
            return
        model = _model_argument(site)
        placed = isinstance(model, cst.Call) and isinstance(model.func, cst.Attribute) and model.func.attr.value in ("cuda", "to")
        if site.qualname == "torchsummary.summary" and model is not None and (not placed or ctx.rewritten(model)):
            # ``summary(model.cuda(), ...)`` (or of a model whose ``.to(device)`` went): prepare places the model, but
            # this runs before it, with inputs on the GPU where there is one (torchsummary's default): the model goes
            # to the process's device here
            ctx.replace(model, stmt, lambda n, a=accelerator: cst.Call(  # type: ignore[misc]
                func=cst.Attribute(value=n, attr=cst.Name("to")), args=[cst.Arg(expression(f"{a}.device"))]))
        if ctx.replace(stmt, stmt, lambda s, a=accelerator: on_main_process(s, a)):  # type: ignore[misc]
            ctx.change("trace on the main process only")


def _saves_of(ctx: Context, site: CallSite) -> list[cst.BaseStatement]:
    """``traced.save(path)`` statements of the scope, for ``traced = torch.jit.trace(...)``."""
    stmt = site.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
            and stmt.body[0].value is site.node and len(stmt.body[0].targets) == 1
            and isinstance(stmt.body[0].targets[0].target, cst.Name)):
        return []
    name = stmt.body[0].targets[0].target.value
    return [
        s.stmt for s in site.scope.calls
        if s.method == "save" and isinstance(s.node.func, cst.Attribute) and isinstance(s.node.func.value, cst.Name)
        and s.node.func.value.value == name and ctx.facts.after(s.stmt, stmt)
        and isinstance(s.stmt, cst.SimpleStatementLine) and len(s.stmt.body) == 1 and isinstance(s.stmt.body[0], cst.Expr)
        and s.stmt.body[0].value is s.node
    ]


def _traces(site: CallSite) -> bool:
    return site.qualname in TRACERS or (site.method in _METHODS and isinstance(site.node.func, cst.Attribute))


def _model_argument(site: CallSite) -> cst.BaseExpression | None:
    """The model the call traces: its first positional argument, or ``model=``/``mod=``."""
    for arg in site.node.args:
        if arg.keyword is not None and arg.keyword.value in ("model", "mod", "obj"):
            return arg.value
    positional = [a for a in site.node.args if a.keyword is None and not a.star]
    return positional[0].value if positional else None
