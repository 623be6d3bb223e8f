"""ReplaceCollectives: the script's own barriers and reductions go through the accelerator.

- the barrier pair that lets the first process build a cache while the others wait, ``if args.local_rank not
  in [-1, 0]: dist.barrier()`` ... ``if args.local_rank == 0: dist.barrier()``, becomes ``with
  accelerator.local_main_process_first():`` around the statements between them (``main_process_first()``
  when the tests are on the global rank);
- ``dist.barrier()`` where every process gets -> ``accelerator.wait_for_everyone()``;
- ``dist.all_reduce(t)`` -> ``t = accelerator.reduce(t)`` (``op=ReduceOp.AVG`` -> ``reduction="mean"``):
  the accelerator returns the reduced tensor rather than changing ``t`` in place.

A barrier only some processes reach (under a rank test, outside such a pair), a reduction of something
that is not a plain name, or another reduction (``MAX``) has no safe counterpart: the file is refused (ACC003).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression, statement, with_block
from accelify.codemods.analysis.distributed import REDUCTIONS, Distributed
from accelify.codemods.analysis.launcher_values import MAIN_TESTS
from accelify.codemods.analysis.rank_tests import rank_test
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.engine.rule import Example, Rule


class ReplaceCollectives(Rule):
    name = "collectives"
    description = "Replace dist.barrier()/all_reduce() by the accelerator's (a barrier pair by main_process_first)."
    examples = (
        Example(
            before='''\
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
local_rank = int(os.environ["LOCAL_RANK"])
if local_rank != 0:
    dist.barrier()  # the first process builds the data, the others wait
data = torch.ones(4, 2)
if local_rank == 0:
    dist.barrier()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in data:
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    dist.all_reduce(loss)
dist.barrier()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
local_rank = accelerator.local_process_index
with accelerator.local_main_process_first():
    # the first process builds the data, the others wait
    data = torch.ones(4, 2)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in data:
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    loss = accelerator.reduce(loss)
accelerator.wait_for_everyone()
accelerator.end_training()
''',
            warnings=("ACC022:13",),
        ),
        Example(
            before='''\
import torch
import torch.distributed as dist
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
print(dist.is_available())
''',
            after='''\
import torch
import torch.distributed as dist
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.print(dist.is_available())
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        found = ctx.plan.distributed
        if not found or not ctx.accelerating:
            return
        paired = self._pairs(ctx, found)
        for site in found.barriers:
            if site.node in paired:
                continue
            if not _alone(site) or found.main_only(ctx.facts, site.stmt, site.scope) or _under_rank_test(ctx, site, found):
                ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func),
                          fix="a barrier only some processes reach: use `accelerator.wait_for_everyone()` where every process gets")
            self._swap(ctx, site, lambda a: f"{a}.wait_for_everyone()")
        for site in found.reductions:
            self._reduce(ctx, site)

    def _pairs(self, ctx: Context, found: Distributed) -> set[cst.CSTNode]:
        """``if <not main>: barrier()`` ... ``if <main>: barrier()`` in one block: ``with ..._process_first():``."""
        paired: set[cst.CSTNode] = set()
        firsts = [(s, _guard(ctx, s)) for s in found.barriers]
        for site, guard in firsts:
            if guard is None or site.node in paired:
                continue
            scope = site.scope
            waits = rank_test(guard.test, scope, found) if isinstance(guard.test, cst.Comparison) else None
            if waits not in (f"not {t}" for t in MAIN_TESTS):
                continue
            local = waits == f"not {MAIN_TESTS[1]}"
            block = _block(ctx, guard)
            if block is None:
                continue
            closing = next(
                ((other, g) for other, g in firsts if g is not None and g is not guard and g in block
                 and block.index(g) > block.index(guard) and _releases(g, scope, found, local)),
                None,
            )
            if closing is None:
                continue
            other, second = closing
            between = block[block.index(guard) + 1: block.index(second)]
            if not between:
                continue
            paired |= {site.node, other.node}
            ctx.remove(guard)
            ctx.remove(second)
            method = "local_main_process_first" if local else "main_process_first"
            ctx.regroup_through(scope, between, lambda stmts, a, f=method: [with_block(f"{a}.{f}()", stmts)])  # type: ignore[misc]
            ctx.change("a barrier pair -> accelerator.main_process_first()")
        return paired

    def _swap(self, ctx: Context, site: CallSite, text: Callable[[str], str]) -> None:
        ctx.replace_through(site.scope, site.node, site.stmt, lambda _, a: expression(text(a)))
        ctx.change("dist.barrier() -> accelerator.wait_for_everyone()")

    def _reduce(self, ctx: Context, site: CallSite) -> None:
        args = site.node.args
        tensor = args[0].value if args and args[0].keyword is None else None
        op = next((a.value for a in args[1:] if a.keyword is None or a.keyword.value == "op"), None)
        reduction = REDUCTIONS.get((dotted(op) or "").rsplit(".", 1)[-1]) if op is not None else None
        known = op is None or (dotted(op) or "").rsplit(".", 1)[-1] in REDUCTIONS
        if not _alone(site) or not isinstance(tensor, cst.Name) or not known or len(args) > 2:
            ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func),
                      fix="use `t = accelerator.reduce(t)` (sum) or `accelerator.reduce(t, reduction=\"mean\")`")
        assert isinstance(tensor, cst.Name)
        extra = f", reduction={reduction}" if reduction else ""
        name = tensor.value
        ctx.replace_through(site.scope, site.stmt, site.stmt, lambda n, a: n.with_changes(  # type: ignore[attr-defined]
            body=[statement(f"{name} = {a}.reduce({name}{extra})").body[0]]))  # type: ignore[attr-defined]
        ctx.change("dist.all_reduce(t) -> t = accelerator.reduce(t)")


def _alone(site: CallSite) -> bool:
    stmt = site.stmt
    return (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is site.node
    )


def _guard(ctx: Context, site: CallSite) -> cst.If | None:
    """The ``if`` whose only statement is this barrier."""
    parent = ctx.facts.parent_stmt.get(site.stmt)
    if isinstance(parent, cst.If) and parent.orelse is None and isinstance(parent.body, cst.IndentedBlock):
        if len(parent.body.body) == 1 and parent.body.body[0] is site.stmt and _alone(site):
            return parent
    return None


def _releases(guard: cst.If, scope: Scope, found: Distributed, local: bool) -> bool:
    """``if local_rank == 0: barrier()`` (the main process, done, lets the others go)."""
    text = rank_test(guard.test, scope, found) if isinstance(guard.test, cst.Comparison) else None
    main = MAIN_TESTS[1] if local else MAIN_TESTS[0]
    return text is not None and (text == main or text.endswith(f" and {main}"))


def _block(ctx: Context, stmt: cst.BaseStatement) -> list[cst.BaseStatement] | None:
    parent = ctx.facts.parent_stmt.get(stmt)
    if parent is None:
        unit = next((f for f in ctx.facts.units.values() if stmt in f.module.body), None)
        return list(unit.module.body) if unit is not None else None
    for child in parent.children:
        if isinstance(child, cst.IndentedBlock) and stmt in child.body:
            return list(child.body)
        if isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler)) and isinstance(child.body, cst.IndentedBlock) and stmt in child.body.body:
            return list(child.body.body)
    return None


def _under_rank_test(ctx: Context, site: CallSite, found: Distributed) -> bool:
    for outer in ctx.facts.chain(site.stmt)[1:]:
        if isinstance(outer, (cst.If, cst.While)) and any(
            n in found.local_nodes for n in m.findall(outer.test, m.Name() | m.Attribute() | m.Call())
        ):
            return True
    return False
