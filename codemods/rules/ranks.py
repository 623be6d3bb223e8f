"""MapRanks: what the script read from the launcher, and its tests on it, come from the accelerator.

In a script that distributes itself (it sets up a process group, wraps the model in DDP, shards with a
DistributedSampler), the values the launcher set keep their names and take the runtime's answers:

- ``int(os.environ["RANK"])`` / ``"LOCAL_RANK"`` / ``"WORLD_SIZE"``, ``dist.get_rank()``,
  ``dist.get_world_size()`` -> ``accelerator.process_index`` / ``local_process_index`` / ``num_processes``;
  ``dist.is_initialized()`` -> ``accelerator.num_processes > 1``;
- tests: ``rank == 0`` -> ``accelerator.is_main_process``, ``args.local_rank in [-1, 0]`` ->
  ``accelerator.is_local_main_process``, ``args.local_rank != -1`` / ``int(os.environ.get("RANK", -1)) != -1``
  -> ``accelerator.num_processes > 1`` (``== -1`` -> ``== 1``), ``args.rank % ngpus_per_node == 0`` ->
  ``accelerator.is_main_process``; a test of mode flags around one rank test
  (``not args.multiprocessing_distributed or (... and args.rank % ngpus_per_node == 0)``) says what the rank
  test says; ``args.gpu is None or args.gpu == 0`` on the index ``mp.spawn`` gives its worker ->
  ``accelerator.is_local_main_process``;
- ``device = f"cuda:{local_rank}"`` -> ``device = str(accelerator.device)`` (the script keeps a string).

A value printed as it is (``args.local_rank`` in a log line) stays. A helper that holds such a test gets
the accelerator (threading).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from accelify.codemods.analysis.tree_walk import children
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.distributed import IS_INITIALIZED, Distributed
from accelify.codemods.analysis.launcher_values import env_read, source
from accelify.codemods.analysis.rank_tests import mode_test, rank_of, rank_test, spawn_test
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.engine.rule import Example, Rule


class MapRanks(Rule):
    name = "ranks"
    description = "Read the rank, local rank and world size from the accelerator, and test them through it."
    examples = (
        Example(
            before='''\
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = int(os.environ["RANK"])
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    if rank == 0:
        print("rank", rank, "of", dist.get_world_size())
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
rank = accelerator.process_index
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    if accelerator.is_main_process:
        accelerator.print("rank", rank, "of", accelerator.num_processes)
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import os
import torch
rank = int(os.environ.get("RANK", 0))
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    if rank == 0:
        print(x)
''',
            after='''\
import os
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
rank = int(os.environ.get("RANK", 0))
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    if rank == 0:
        accelerator.print(x)
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        found = ctx.plan.distributed
        if not found or not ctx.accelerating:
            return
        for stmt in ctx.facts.order:
            scope = found.scope_of(stmt)
            if scope is None or any(s in ctx.edits.removed for s in ctx.facts.chain(stmt)):
                continue
            for node, text in _mapped(stmt, scope, found):
                if ctx.dropped(node):
                    continue  # in code another rule replaced (``RandomSampler(ds) if args.local_rank == -1 else ...``)
                if ctx.replace_through(scope, node, stmt, lambda n, a, t=text: _written(t, n, a)):  # type: ignore[misc]
                    ctx.change("launcher values and rank tests from the accelerator")


def _mapped(stmt: cst.BaseStatement, scope: Scope, found: Distributed) -> Iterator[tuple[cst.CSTNode, str]]:
    """The expressions of ``stmt`` (not of the statements inside it) that read the launcher, outermost first,
    with what replaces each (``{a}`` is the accelerator)."""
    pending: list[cst.CSTNode] = [c for c in reversed(children(stmt)) if not isinstance(c, (cst.BaseStatement, cst.BaseSuite))]
    while pending:
        node = pending.pop()
        text = _replacement(node, scope, found) if isinstance(node, cst.BaseExpression) else None
        if text is not None:
            yield node, text
            continue
        pending.extend(c for c in reversed(children(node)) if not isinstance(c, (cst.BaseStatement, cst.BaseSuite)))


def _replacement(node: cst.BaseExpression, scope: Scope, found: Distributed) -> str | None:
    if isinstance(node, (cst.BooleanOperation, cst.UnaryOperation)):
        return mode_test(node, scope, found) or spawn_test(node, found)
    if isinstance(node, cst.Comparison):
        return rank_test(node, scope, found)
    if isinstance(node, cst.Call) and scope.imports.qualname(node.func) == IS_INITIALIZED and not node.args:
        return "{a}.num_processes > 1"
    if isinstance(node, (cst.Call, cst.Subscript)):
        rank = source(node, scope.imports)
        if rank is None or rank.sentinel:
            return None
        typed = not isinstance(node, cst.Subscript) and (  # ``os.environ["RANK"]`` alone is a string
            scope.imports.qualname(node.func) in ("int", "builtins.int") or env_read(node, scope.imports) is None  # type: ignore[attr-defined]
        )
        return f"{{a}}.{rank.kind}" if typed else f"str({{a}}.{rank.kind})"
    if isinstance(node, cst.FormattedString) and len(node.parts) == 2:  # f"cuda:{local_rank}"
        text, value = node.parts
        if isinstance(text, cst.FormattedStringText) and text.value == "cuda:" and isinstance(value, cst.FormattedStringExpression):
            rank = rank_of(value.expression, scope, found)
            if (rank is not None and rank.kind == "local_process_index") or dotted(value.expression) in found.device_indexes:
                return "str({a}.device)"
    return None


def _written(text: str, node: cst.CSTNode, accelerator: str) -> cst.CSTNode:
    new = expression(text.format(a=accelerator))
    if isinstance(node, cst.BaseExpression) and (node.lpar or node.rpar):
        new = new.with_changes(lpar=node.lpar, rpar=node.rpar)
    return new
