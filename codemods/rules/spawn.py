"""CollapseSpawn: the launcher starts the processes, so ``mp.spawn`` gives way to the direct call.

``mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))`` started one process per GPU
from the script; ``accelify launch`` (or ``torchrun``) now starts them, each running the script once. The
spawn becomes the direct call the script makes in its other branch (``main_worker(args.gpu,
ngpus_per_node, args)``), so every process runs the worker as the single-process path did. A spawn with
no such call beside it is refused (ACC003): which arguments the worker should get is the author's call.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.engine.rule import Example, Rule


class CollapseSpawn(Rule):
    name = "spawn"
    description = "Replace mp.spawn(worker, ...) by the direct call the script makes without it."
    examples = (
        Example(
            before='''\
import argparse
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
def worker(index, args):
    if args.spawn:
        dist.init_process_group("gloo", rank=index, world_size=2)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
parser = argparse.ArgumentParser()
parser.add_argument("--spawn", action="store_true")
args = parser.parse_args()
if args.spawn:
    mp.spawn(worker, nprocs=2, args=(args,))
else:
    worker(0, args)
''',
            after='''\
import argparse
import torch
from accelify.runtime import Accelerator
def worker(index, args):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.end_training()
parser = argparse.ArgumentParser()
parser.add_argument("--spawn", action="store_true")
args = parser.parse_args()
if args.spawn:
    worker(0, args)
else:
    worker(0, args)
''',
        ),
        Example(
            before='''\
import torch
import torch.multiprocessing as mp
def load(index, queue):
    queue.put(index)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
import torch.multiprocessing as mp
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
def load(index, queue):
    queue.put(index)
model = torch.nn.Linear(2, 1)
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
        if not ctx.accelerating:
            return
        for site in ctx.plan.distributed.spawns:
            direct = _direct_call(ctx, site)
            if direct is None:
                ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func),
                          fix="call the worker directly, once: the launcher starts one process per device")
            ctx.replace(site.node, site.stmt, lambda _, d=direct: d)  # type: ignore[misc]
            ctx.change("mp.spawn -> the direct call (the launcher starts the processes)")


def _direct_call(ctx: Context, site: CallSite) -> cst.Call | None:
    """``worker(args.gpu, n, args)`` alone on its line in the other branch of the ``if`` around the spawn."""
    if not site.node.args or not isinstance(site.node.args[0].value, cst.Name):
        return None
    worker = site.node.args[0].value.value
    stmt = site.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return None
    guard = ctx.facts.parent_stmt.get(stmt)
    if not isinstance(guard, cst.If):
        return None
    branches = [guard.body, guard.orelse.body if isinstance(guard.orelse, cst.Else) else None]
    for block in branches:
        if not isinstance(block, cst.IndentedBlock) or stmt in block.body:
            continue
        for other in block.body:
            if isinstance(other, cst.SimpleStatementLine) and len(other.body) == 1 and isinstance(other.body[0], cst.Expr):
                call = other.body[0].value
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == worker:
                    return call
    return None
