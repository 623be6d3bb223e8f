"""AccumulateGradients: gradient accumulation by hand becomes ``accelerator.accumulate``.

With ``Accelerator(gradient_accumulation_steps=k)`` (``analysis/creation.py`` reads ``k`` from the modulo
test), the loop body up to the optimizer step goes under ``with accelerator.accumulate(model):``, so
the N processes synchronise gradients only on the steps that update; ``loss = loss / k`` goes
(``accelerator.backward`` divides), and later reads of the loss keep the divided value, ``(loss / k)``;
in the ``if (step + 1) % k == 0:`` block, clipping runs under ``if accelerator.sync_gradients:``, the
optimizer and scheduler steps and ``zero_grad`` run on every batch (the prepared ones act only when
the gradients are synchronised: one process steps exactly where the original did), ``model.zero_grad()``
becomes the optimizer's (the model's would clear the accumulated gradients), and the rest of the block
(counters, logging, checkpoints) follows the ``with`` under ``if accelerator.sync_gradients:``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.gradient_accumulation import Accumulation, find_accumulation
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression, statement
from accelify.codemods.engine.rule import Example, Rule


class AccumulateGradients(Rule):
    name = "accumulation"
    description = "Turn hand-written gradient accumulation into accelerator.accumulate()."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 0
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss = loss / 2
    loss.backward()
    print(loss.item())
    if (i + 1) % 2 == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(gradient_accumulation_steps=2)
loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
steps = 0
for i, (x, y) in enumerate(loader):
    with accelerator.accumulate(model):
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        accelerator.print((loss / 2).item())
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    if accelerator.sync_gradients:
        steps += 1
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
    if i % 2 == 0:
        print(i)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for i, (x, y) in enumerate(loader):
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    optimizer.zero_grad()
    if i % 2 == 0:
        accelerator.print(i)
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

accum_steps = 4
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i, (x, y) in enumerate(loader):
    x, y = x.cuda(), y.cuda()
    loss = torch.nn.functional.mse_loss(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
    else:
        print(f"accumulating {i + 1}")
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
accum_steps = 4
loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y) / accum_steps
    accelerator.backward(loss)
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
    else:
        accelerator.print(f"accumulating {i + 1}")
accelerator.end_training()
''',
            warnings=("ACC006:12",),
        ),
        Example(
            # a WGAN's critic schedule: the generator trains every n_critic batches while the critic steps on every
            # batch; two optimizers, a backward under the condition: not accumulation, left as it is
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
G = torch.nn.Linear(2, 2)
D = torch.nn.Linear(2, 1)
opt_g = torch.optim.Adam(G.parameters())
opt_d = torch.optim.Adam(D.parameters())
loader = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=2)
n_critic = 5
for i, (real,) in enumerate(loader):
    opt_d.zero_grad()
    z = torch.randn(real.size(0), 2)
    d_loss = D(G(z).detach()).mean() - D(real).mean()
    d_loss.backward()
    opt_d.step()
    if i % n_critic == 0:
        opt_g.zero_grad()
        g_loss = -D(G(z)).mean()
        g_loss.backward()
        opt_g.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
G = torch.nn.Linear(2, 2)
D = torch.nn.Linear(2, 1)
opt_g = torch.optim.Adam(G.parameters())
opt_d = torch.optim.Adam(D.parameters())
loader = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=2)
G, D, opt_g, opt_d, loader = accelerator.prepare(G, D, opt_g, opt_d, loader)
n_critic = 5
for i, (real,) in enumerate(loader):
    opt_d.zero_grad()
    z = torch.randn(real.size(0), 2)
    d_loss = D(G(z).detach()).mean() - D(real).mean()
    accelerator.backward(d_loss)
    opt_d.step()
    if i % n_critic == 0:
        opt_g.zero_grad()
        g_loss = -D(G(z)).mean()
        accelerator.backward(g_loss)
        opt_g.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        found = ctx.plan.analysis(find_accumulation)
        for step_if in found.unconverted:
            ctx.warn(codes.ACCUMULATION, step_if)
        for accumulation in found.loops:
            accelerator = ctx.accelerator_in(accumulation.loop.scope)
            if accelerator is None:
                continue
            self._rewrite(ctx, accumulation, accelerator)
            ctx.change("gradient accumulation -> accelerator.accumulate()")

    def _rewrite(self, ctx: Context, accumulation: Accumulation, accelerator: str) -> None:
        body = accumulation.loop.node.body
        assert isinstance(body, cst.IndentedBlock)
        stmts = list(body.body)
        wrapped = stmts[: stmts.index(accumulation.step_if) + 1]
        steps = code_of(accumulation.steps)
        for division in accumulation.divisions:
            ctx.remove(division)
        if accumulation.loss is not None and accumulation.divisions:
            self._keep_divided_reads(ctx, accumulation, stmts, steps)
        optimizer = _stepped(accumulation.step_if)
        models = accumulation.models
        header = f"with {accelerator}.accumulate({', '.join(models)}):"

        def make(updated: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
            *head, step_if = updated
            assert isinstance(step_if, cst.If) and isinstance(step_if.body, cst.IndentedBlock)
            clip, each, rest = [], [], []
            for stmt in step_if.body.body:
                text = code_of(stmt)
                if "clip_grad_" in text or ".unscale_(" in text:
                    clip.append(stmt)
                elif _step_like(stmt):
                    each.append(_zero_grad_of(stmt, models, optimizer))
                else:
                    rest.append(stmt)
            sync = f"if {accelerator}.sync_gradients:"
            inner = [*head, *([_under(sync, clip, step_if.leading_lines)] if clip else []), *each]
            if not clip and each:
                each[0] = each[0].with_changes(leading_lines=[*step_if.leading_lines, *each[0].leading_lines])
                inner = [*head, *each]
            first = inner[0]
            block = _under(header, [first.with_changes(leading_lines=[]), *inner[1:]], first.leading_lines)
            return [block, *([_under(sync, rest, [])] if rest else [])]

        ctx.regroup(wrapped, make)

    def _keep_divided_reads(self, ctx: Context, accumulation: Accumulation, stmts: list[cst.BaseStatement], steps: str) -> None:
        """``tr_loss += loss.item()`` after ``loss = loss / k`` went: ``tr_loss += (loss / k).item()``; in the
        loop and after it, until the name is assigned something else outside the loop."""
        name = accumulation.loss
        assert name is not None
        scope = accumulation.loop.scope
        order = ctx.facts.order
        division = order[accumulation.divisions[-1]][1]
        loop_last = order[accumulation.loop.node][1]
        rebinds = [
            order[b.stmt][0] for b in scope.bindings.get(name, [])
            if order[b.stmt][0] > loop_last
        ]
        until = min(rebinds, default=float("inf"))
        for stmt in ctx.facts.order:
            if not isinstance(stmt, cst.SimpleStatementLine) or not (division < order[stmt][0] < until):
                continue
            if ctx.facts.top_stmt(stmt, scope) is None:
                continue  # another function
            backward = m.findall(stmt, m.Call(func=m.Attribute(attr=m.Name("backward"))))
            skip = {id(c.func.value) for c in backward} | {id(c.args[0].value) for c in backward if c.args}  # type: ignore[attr-defined]
            targets = {id(t.target) for t in m.findall(stmt, m.AssignTarget())}  # type: ignore[attr-defined]
            for node in m.findall(stmt, m.Name(name)):
                if id(node) in skip or id(node) in targets or ctx.dropped(node):
                    continue
                ctx.replace(node, stmt, lambda _, s=steps: expression(f"({name} / {s})"))  # type: ignore[misc]


def _stepped(step_if: cst.If) -> str | None:
    """The optimizer the block steps (``optimizer`` of ``optimizer.step()``)."""
    for call in m.findall(step_if.body, m.Call(func=m.Attribute(attr=m.Name("step")))):
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        if not call.args:
            return code_of(call.func.value)
    return None


def _step_like(stmt: cst.BaseStatement) -> bool:
    """``x.step()`` / ``x.zero_grad(...)`` alone on a line."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    call = stmt.body[0].value
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value in ("step", "zero_grad")


def _zero_grad_of(stmt: cst.BaseStatement, models: list[str], optimizer: str | None) -> cst.BaseStatement:
    """``model.zero_grad()`` -> ``optimizer.zero_grad()`` (the model's would clear the accumulated gradients)."""
    assert isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr)
    call = stmt.body[0].value
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    if call.func.attr.value == "zero_grad" and code_of(call.func.value) in models and optimizer is not None:
        call = call.with_changes(func=call.func.with_changes(value=expression(optimizer)))
        return stmt.with_changes(body=[stmt.body[0].with_changes(value=call)])
    return stmt


def _under(header: str, body: list[cst.BaseStatement], leading: list[cst.EmptyLine] | tuple) -> cst.BaseStatement:
    """``header`` (an ``if ...:``/``with ...:`` line) over ``body``."""
    shell = statement(f"{header}\n    pass\n")
    assert isinstance(shell, (cst.If, cst.With))
    return shell.with_changes(body=cst.IndentedBlock(list(body)), leading_lines=list(leading))
