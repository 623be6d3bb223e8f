"""ConvertAmp: hand-written mixed precision becomes the accelerator's.

The accelerator's ``mixed_precision=...`` comes from what ``analysis/mixed_precision.py`` found (the
precision, and the script's own flag for when it is on). This rule rewrites the uses:

- ``with torch.autocast(...):`` / ``with torch.cuda.amp.autocast():`` -> ``with accelerator.autocast():``,
  and ``ctx = nullcontext() if ... else torch.amp.autocast(...)`` goes, each ``with ctx:`` entering
  ``accelerator.autocast()`` (a fresh context each time);
- the ``GradScaler`` goes: ``scaler.scale(loss).backward()`` -> ``accelerator.backward(loss)``,
  ``scaler.unscale_(opt)`` goes (``accelerator.clip_grad_norm_`` unscales), ``scaler.step(opt)`` ->
  ``opt.step()`` (the prepared optimizer skips a step with inf/NaN gradients), ``scaler.update()`` goes,
  ``scale > scaler.get_scale()`` after the update -> ``accelerator.optimizer_step_was_skipped``, and a
  ``"scaler": scaler.state_dict()`` entry of a checkpoint dict goes with its ``load_state_dict``.

Anything else done with the scaler is left as it is, with ACC005; so is any call of NVIDIA apex's ``amp`` the
apex rule did not replace.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.mixed_precision import find_amp
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.engine.rule import Example, Rule


class ConvertAmp(Rule):
    name = "amp"
    description = "Replace GradScaler and autocast by the accelerator's mixed precision."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.cuda.amp.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(mixed_precision="fp16" if torch.cuda.is_available() else "no")
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    with accelerator.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    with torch.no_grad():
        scale = y.abs().max()
    loss = torch.nn.functional.mse_loss(model(x), y / scale)
    loss.backward()
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
    with torch.no_grad():
        scale = y.abs().max()
    loss = torch.nn.functional.mse_loss(model(x), y / scale)
    accelerator.backward(loss)
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
from contextlib import nullcontext
import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader, ctx):
    with torch.no_grad(), ctx:
        return sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in loader)


use_amp = torch.cuda.is_available()
ctx = torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else nullcontext()
train = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
val = DataLoader(TensorDataset(torch.randn(16, 16), torch.randn(16, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x, y in train:
    with ctx:
        loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("val loss", evaluate(model, val, ctx))
''',
            after='''\
from contextlib import nullcontext
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(mixed_precision="bf16" if torch.cuda.is_available() else "no")


def evaluate(model, loader, ctx):
    with torch.no_grad(), ctx:
        return sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in loader)


use_amp = torch.cuda.is_available()
ctx = torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else nullcontext()
train = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
val = DataLoader(TensorDataset(torch.randn(16, 16), torch.randn(16, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer, train, val = accelerator.prepare(model, optimizer, train, val)
for x, y in train:
    with ctx:
        loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
accelerator.print("val loss", evaluate(model, val, ctx))
accelerator.end_training()
''',
            warnings=("ACC005:12", "ACC050:8"),
        ),
        Example(  # a use left (reported) keeps the object it reads
            before='''
import torch
model = torch.nn.Linear(2, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print("scale", scaler.get_scale())
''',
            after='''
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(mixed_precision="fp16" if torch.cuda.is_available() else "no")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    with accelerator.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
    accelerator.print("scale", scaler.get_scale())
accelerator.end_training()
''',
            warnings=('ACC005:14',),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.facts.calls:  # apex's amp: what the apex rule did not replace stays, reported
            if (site.qualname or "").startswith("apex.amp.") and not ctx.rewritten(site.node) and not ctx.is_skipped(site.stmt):
                ctx.warn(codes.AMP, site.node, name=code_of(site.node.func))
        amp = ctx.plan.analysis(find_amp)
        if amp is None:
            return
        for site in amp.autocasts:
            if ctx.replace_through(site.scope, site.node, site.stmt, lambda _, a: expression(f"{a}.autocast()")):
                ctx.change("autocast -> accelerator.autocast()")
        for context in amp.contexts:
            self._context(ctx, context)
        for scaler in amp.scalers:
            self._scaler(ctx, scaler)

    def _context(self, ctx: Context, context: Binding) -> None:
        """``ctx = ... autocast(...)``: every ``with ctx:`` enters ``accelerator.autocast()``; the binding goes."""
        refs = [(scope, ref) for scope in ctx.facts.scopes for ref in scope.refs.get(context.key, [])
                if ctx.plan.binding_of(scope, context.key) is context]
        withs = {id(item.item): stmt for stmt in ctx.facts.order if isinstance(stmt, cst.With) for item in stmt.items}
        if not refs or any(id(ref) not in withs for _, ref in refs):
            ctx.warn(codes.AMP, context.stmt, name=context.key)
            return
        for scope, ref in refs:
            ctx.replace_through(scope, ref, withs[id(ref)], lambda _, a: expression(f"{a}.autocast()"))
        ctx.remove(context.stmt)
        ctx.change("autocast -> accelerator.autocast()")

    def _scaler(self, ctx: Context, scaler: Binding) -> None:
        uses = [s for s in ctx.facts.calls if _scaler_use(ctx, s, scaler)]
        left: list[CallSite] = []  # uses reported and kept: the scaler they read must stay
        gets = [s for s in uses if s.method == "get_scale"]
        for site in uses:
            scope = site.scope
            if site.method == "scale":
                if not self._scaled_backward(ctx, site, scope):
                    left.append(site)
                continue
            if site.method in ("unscale_", "update") and _alone(site):
                ctx.remove(site.stmt)
            elif site.method == "step" and site.node.args:
                optimizer = site.node.args[0].value
                ctx.replace(site.node, site.stmt, lambda _, o=optimizer: cst.Call(func=cst.Attribute(o, cst.Name("step"))))  # type: ignore[misc]
            elif site.method == "state_dict" and self._checkpoint_entry(ctx, site):
                pass
            elif site.method == "load_state_dict" and _alone(site):
                ctx.remove(site.stmt)
            elif site.method == "get_scale":
                if not self._skip_idiom(ctx, site, gets, scope):
                    ctx.warn(codes.AMP, site.node, name=f"{scaler.key}.get_scale()")
                    left.append(site)
            else:
                ctx.warn(codes.AMP, site.node, name=code_of(site.node.func))
                left.append(site)
        if not left and not _passed(ctx, scaler, uses):
            ctx.remove(scaler.stmt)
        if not left:
            ctx.change("GradScaler -> the accelerator's mixed precision")

    def _scaled_backward(self, ctx: Context, site: CallSite, scope: Scope) -> bool:
        """``scaler.scale(loss).backward(...)`` -> ``accelerator.backward(loss, ...)``; False when it is left, reported."""
        outer = next((s for s in ctx.facts.calls if s.method == "backward" and isinstance(s.node.func, cst.Attribute)
                      and s.node.func.value is site.node), None)
        if outer is None or not site.node.args:
            ctx.warn(codes.AMP, site.node, name=code_of(site.node.func))
            return False
        loss = site.node.args[0].value

        def swap(call: cst.CSTNode, accelerator: str) -> cst.CSTNode:
            assert isinstance(call, cst.Call)
            return call.with_changes(func=expression(f"{accelerator}.backward"), args=[cst.Arg(loss), *call.args])

        ctx.replace_through(scope, outer.node, outer.stmt, swap)
        return True

    def _checkpoint_entry(self, ctx: Context, site: CallSite) -> bool:
        """``{"scaler": scaler.state_dict(), ...}``: the entry goes (the accelerator keeps the scale)."""
        for node in m.findall(site.stmt, m.Dict()):
            assert isinstance(node, cst.Dict)
            for element in node.elements:
                if isinstance(element, cst.DictElement) and element.value is site.node:
                    ctx.replace(node, site.stmt, lambda d, e=element: _drop_entry(d, e))  # type: ignore[misc]
                    return True
        return False

    def _skip_idiom(self, ctx: Context, site: CallSite, gets: list[CallSite], scope: Scope) -> bool:
        """``scale = scaler.get_scale(); scaler.update(); skipped = scale > scaler.get_scale()``."""
        stmt = site.stmt
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            if assign.value is site.node:
                return ctx.remove(stmt)  # the first read; the comparison below replaces both
            comparison = assign.value
            if isinstance(comparison, cst.Comparison) and site.node in (comparison.left, comparison.comparisons[0].comparator):
                ctx.replace_through(scope, comparison, stmt, lambda _, a: expression(f"{a}.optimizer_step_was_skipped"))
                return True
        return False


def _scaler_use(ctx: Context, site: CallSite, scaler: Binding) -> bool:
    """``scaler.step(opt)`` on this scaler: where it is bound, or in a function of the program it is handed to
    (``train_one_epoch(model, loader, optimizer, scaler)`` in an ``engine.py``)."""
    func = site.node.func
    if not isinstance(func, cst.Attribute):
        return False
    if _receiver_is(site, scaler.key) and ctx.plan.binding_of(site.scope, scaler.key) is scaler:
        return True
    return isinstance(func.value, cst.Name) and ctx.plan.origin(site.scope, func.value) is scaler


def _passed(ctx: Context, scaler: Binding, uses: list[CallSite]) -> bool:
    """Whether the scaler's name is read other than as the receiver of ``uses`` (handed to a function): its binding
    then stays, unused by the rewritten uses, so that the call still finds the name."""
    receivers = {id(s.node.func.value) for s in uses if isinstance(s.node.func, cst.Attribute)}
    for scope in ctx.facts.scopes:
        for ref in scope.refs.get(scaler.key, []):
            if id(ref) not in receivers and ctx.plan.binding_of(scope, scaler.key) is scaler:
                return True
    return False


def _receiver_is(site: CallSite, key: str) -> bool:
    func = site.node.func
    return isinstance(func, cst.Attribute) and code_of(func.value) == key


def _alone(site: CallSite) -> bool:
    stmt = site.stmt
    return (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is site.node
    )


def _drop_entry(node: cst.CSTNode, element: cst.DictElement) -> cst.CSTNode:
    assert isinstance(node, cst.Dict)
    elements = [e for e in node.elements if e is not element]
    if elements and node.elements[-1] is element:
        elements[-1] = elements[-1].with_changes(comma=element.comma)
    return node.with_changes(elements=elements)
