"""AccumulateMicroSteps: nanoGPT's micro-step accumulation becomes ``accelerator.accumulate``.

nanoGPT runs ``for micro_step in range(k):`` forward and backward, sets ``model.require_backward_grad_sync``
so that DDP all-reduces on the last micro step only, and steps after the loop. With
``Accelerator(gradient_accumulation_steps=k)`` (``analysis/creation.py`` reads ``k`` from ``range(k)``):

- the loop body goes under ``with accelerator.accumulate(model):`` (it decides when gradients synchronise),
  and the toggle goes (with the ``if ddp:`` that held only it; its comments stay at the top of the body);
- ``loss = loss / k`` goes (``accelerator.backward`` divides); a later read that undid it
  (``loss.item() * k``) loses the ``* k``, any other read keeps the divided value, ``(loss / k)``;
- where the script changes ``k`` after the accelerator exists (``gradient_accumulation_steps //=
  ddp_world_size``), ``accelerator.gradient_accumulation_steps = k`` follows.

A toggle of ``require_backward_grad_sync`` in any other shape is refused (the unsupported rule).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.gradient_accumulation import MicroSteps, find_accumulation
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression, with_block
from accelify.codemods.analysis.names import dotted
from accelify.codemods.engine.rule import Example, Rule


class AccumulateMicroSteps(Rule):
    name = "micro_steps"
    description = "Turn micro-step accumulation with require_backward_grad_sync into accelerator.accumulate()."
    examples = (
        Example(
            before='''\
import os
import torch
from torch.distributed import init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
steps = 4
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group("gloo")
    steps //= int(os.environ["WORLD_SIZE"])
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if ddp:
    model = DDP(model)
for x in torch.ones(3, 2):
    for micro_step in range(steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == steps - 1
        loss = model(x).sum()
        loss = loss / steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(loss.item() * steps)
''',
            after='''\
import torch
from accelify.runtime import Accelerator
steps = 4
accelerator = Accelerator(cpu=True, gradient_accumulation_steps=steps)
ddp = accelerator.num_processes > 1
if ddp:
    steps //= accelerator.num_processes
    accelerator.gradient_accumulation_steps = steps
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(3, 2):
    for micro_step in range(steps):
        with accelerator.accumulate(model):
            loss = model(x).sum()
            accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.print(loss.item())
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
steps = 4
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(3, 2):
    for micro_step in range(steps):
        loss = model(x).sum() / steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
steps = 4
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(3, 2):
    for micro_step in range(steps):
        loss = model(x).sum() / steps
        accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        micro_steps = ctx.plan.analysis(find_accumulation).micro_steps
        covered = {id(t) for micro in micro_steps for t in micro.toggles}
        for toggle in ctx.plan.distributed.sync_toggles if ctx.accelerating else ():
            if id(toggle) not in covered and id(ctx.facts.parent_stmt.get(toggle)) not in covered:
                ctx.abort(codes.MANUAL_DISTRIBUTED, toggle, name="require_backward_grad_sync",
                          fix="accumulate under `with accelerator.accumulate(model):`, which decides when gradients synchronise")
        for micro in micro_steps:
            scope = micro.loop.scope
            if ctx.accelerator_in(scope) is None:
                continue
            self._rewrite(ctx, micro)
            ctx.change("micro-step accumulation -> accelerator.accumulate()")

    def _rewrite(self, ctx: Context, micro: MicroSteps) -> None:
        scope = micro.loop.scope
        for toggle in micro.toggles:
            ctx.remove(toggle)
        for division in micro.divisions:
            ctx.remove(division)
        steps = code_of(micro.steps)
        if micro.loss is not None and micro.divisions:
            self._divided_reads(ctx, micro, steps)
        self._steps_changed(ctx, micro, steps)
        body = micro.loop.node.body
        assert isinstance(body, cst.IndentedBlock)
        header = f"{ctx.accelerator_in(scope) or 'accelerator'}.accumulate({', '.join(micro.models)})"
        ctx.regroup(list(body.body), lambda stmts, h=header: [with_block(h, stmts)])

    def _divided_reads(self, ctx: Context, micro: MicroSteps, steps: str) -> None:
        """After ``loss = loss / k`` went: ``loss.item() * k`` -> ``loss.item()``, other reads -> ``(loss / k)``,
        until the name is bound again after the loop."""
        name = micro.loss
        assert name is not None
        scope = micro.loop.scope
        order = ctx.facts.order
        start = order[micro.divisions[-1]][1]
        rebinds = [order[b.stmt][0] for b in scope.bindings.get(name, []) if order[b.stmt][0] > order[micro.loop.node][1]]
        until = min(rebinds, default=float("inf"))
        for stmt in order:
            if not isinstance(stmt, cst.SimpleStatementLine) or not (start < order[stmt][0] < until) or stmt in micro.divisions:
                continue
            if ctx.facts.top_stmt(stmt, scope) is None:
                continue
            undone = {id(n.left): n for n in m.findall(stmt, m.BinaryOperation(operator=m.Multiply()))  # type: ignore[union-attr]
                      if code_of(n.right).strip() == steps}  # type: ignore[attr-defined]
            skip: set[int] = set()
            for left_id, product in undone.items():
                left = product.left  # type: ignore[attr-defined]
                if name in {n.value for n in m.findall(left, m.Name())}:  # type: ignore[attr-defined]
                    ctx.replace(product, stmt, lambda n: n.left)  # type: ignore[attr-defined]
                    skip |= {id(n) for n in m.findall(left, m.Name(name))}
            backward = m.findall(stmt, m.Call(func=m.Attribute(attr=m.Name("backward"))) | m.Call(func=m.Attribute(attr=m.Name("scale"))))
            skip |= {id(c.func.value) for c in backward} | {id(a.value) for c in backward for a in c.args}  # type: ignore[attr-defined]
            targets = {id(t.target) for t in m.findall(stmt, m.AssignTarget())}  # type: ignore[attr-defined]
            for node in m.findall(stmt, m.Name(name)):
                if id(node) not in skip and id(node) not in targets and not ctx.dropped(node):
                    ctx.replace(node, stmt, lambda _, s=steps: expression(f"({name} / {s})"))  # type: ignore[misc]

    def _steps_changed(self, ctx: Context, micro: MicroSteps, steps: str) -> None:
        """``k //= world_size`` after the accelerator exists: tell it the new count."""
        key = dotted(micro.steps)
        if key is None:
            return
        scope = micro.loop.scope
        owner = scope.resolve(key.split(".")[0]) or scope
        order = ctx.facts.order
        for binding in owner.bindings.get(key, []):
            stmt = binding.stmt
            if order[stmt][0] < order[micro.loop.node][0] and ctx.after_accelerator(binding.where, stmt):
                accelerator = ctx.accelerator_in(binding.where)
                if accelerator is not None:
                    ctx.insert_after(stmt, [f"{accelerator}.gradient_accumulation_steps = {steps}"])
