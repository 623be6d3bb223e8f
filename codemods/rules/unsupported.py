"""WarnUnsupported: manual distributed code (process groups, DDP, DataParallel, DistributedSampler) stops the conversion,
and every place of it is reported, so one pass shows all that must be removed by hand.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.context import Abort, Context, Located, code_of
from accelify.codemods.names import dotted
from accelify.codemods.rule import Example, Rule

WRAPPERS = {"torch.nn.parallel.DistributedDataParallel"}  # DataParallel is converted (rules/data_parallel.py)
SAMPLERS = {"torch.utils.data.DistributedSampler"}
_MODULO = m.BinaryOperation(operator=m.Modulo())

# What replaces each piece of hand-written distributed code (by the called name's last part).
_FIXES = {
    "init_process_group": "remove it: the launcher and the Accelerator set up the processes",
    "destroy_process_group": "remove it: `accelerator.end_training()` ends the run",
    "DistributedSampler": "remove the sampler and pass `shuffle=True` to the DataLoader: the prepared loader shards the data",
    "set_epoch": "remove it: the prepared data loader reshuffles every epoch",
    "barrier": "use `accelerator.wait_for_everyone()`",
    "all_reduce": "use `accelerator.reduce(tensor)`",
    "all_gather": "use `accelerator.gather(tensor)`",
    "get_rank": "use `accelerator.process_index`",
    "get_world_size": "use `accelerator.num_processes`",
    "rank": "use `if accelerator.is_main_process:`",
}
_DEFAULT_FIX = "remove it or use the matching `accelerator` method: `accelerator.prepare` wraps the model and shards the data loaders"
_RANK_NAMES = ("rank", "local_rank", "global_rank", "world_rank")
_RANK_TESTS = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)


class WarnUnsupported(Rule):
    name = "unsupported"
    description = "Stop on manual distributed code (reporting every place of it); warn about AMP and hand-written accumulation."
    examples = (
        Example(
            before='''\
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "net.pt")
''',
            warnings=('ACC003:3', 'ACC004:4', 'ACC003:9'),
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, x in enumerate(torch.ones(4, 2)):
    model(x).sum().backward()
    optimizer.step()
    if step % 2 == 0:
        print(step)
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step, x in enumerate(torch.ones(4, 2)):
    accelerator.backward(model(x).sum())
    optimizer.step()
    if step % 2 == 0:
        accelerator.print(step)
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        stops = _distributed_code(ctx)
        if stops:
            raise Abort(*stops)


def _distributed_code(ctx: Context) -> list[Located]:
    """Every place of hand-written distributed code, or nothing when the file has none.

    Process-group calls, DDP/DataParallel wraps and DistributedSampler make a file "manual
    distributed"; only then are ``.set_epoch(...)`` and ``if rank == 0:`` reported too (on their own
    they may mean something else)."""
    found: list[Located] = []
    for site in ctx.facts.calls:
        q = site.qualname or ""
        name = code_of(site.node.func)
        if q in WRAPPERS:
            found.append(ctx.warning(codes.DATA_PARALLEL, site.node, name=name))
        elif q in SAMPLERS or (q.startswith("torch.distributed.") and not q.startswith("torch.distributed.run")):
            fix = _FIXES.get(q.rsplit(".", 1)[-1], _DEFAULT_FIX)
            found.append(ctx.warning(codes.MANUAL_DISTRIBUTED, site.node, name=name, fix=fix))
    if not found:
        return []
    rank_tests = [stmt for stmt in ctx.facts.parent_stmt if isinstance(stmt, cst.If) and _tests_rank(stmt.test)]
    inside_tests = {n for stmt in rank_tests for n in m.findall(stmt.test, m.Call())}
    found = [f for f in found if f[0] not in inside_tests]
    for stmt in rank_tests:
        found.append(ctx.warning(codes.MANUAL_DISTRIBUTED, stmt, name=f"if {code_of(stmt.test)}:", fix=_FIXES["rank"]))
    for site in ctx.facts.calls:
        if site.method == "set_epoch":
            found.append(ctx.warning(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func), fix=_FIXES["set_epoch"]))
    return found


def _tests_rank(test: cst.BaseExpression) -> bool:
    """``rank == 0``, ``args.local_rank in (-1, 0)``, ``dist.get_rank() != 0`` and the like."""
    if isinstance(test, cst.BooleanOperation):
        return _tests_rank(test.left) or _tests_rank(test.right)
    if isinstance(test, cst.UnaryOperation):
        return _tests_rank(test.expression)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    return isinstance(test.comparisons[0].operator, _RANK_TESTS) and (
        _is_rank(test.left) or _is_rank(test.comparisons[0].comparator)
    )


def _is_rank(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Call):
        expr = expr.func
    name = dotted(expr)
    return name is not None and name.rsplit(".", 1)[-1].lower() in (*_RANK_NAMES, "get_rank")
