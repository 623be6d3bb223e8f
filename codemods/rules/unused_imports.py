"""RemoveUnusedImports: an import only the removed code used goes with it.

Once ``init_process_group``, ``DistributedDataParallel``, ``DistributedSampler``, ``mp.spawn`` or a stored
``nullcontext()`` are gone, ``import torch.distributed as dist``, ``from torch.nn.parallel import
DistributedDataParallel as DDP`` and ``from contextlib import nullcontext`` name nothing. This rule reads
the whole conversion (every other rule's edits applied) and drops each top-level import name that the
script read before and reads no more; an import that was unused already stays as it was. A plain dotted
import (``import torch.utils.data.distributed``) counts as used while some name in the code starts with it
(LibCST's ``RemoveImportsVisitor`` keeps it whenever ``torch`` is used, so the check is done here).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.tree_walk import descendants
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.edits import apply
from accelify.codemods.analysis.names import dotted
from accelify.codemods.engine.rule import Example, Rule


class RemoveUnusedImports(Rule):
    name = "unused_imports"
    description = "Drop the imports that only the removed code used."
    examples = (
        Example(
            before='''\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(2, 1))
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
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import os
import torch
import torch.distributed as dist
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import os
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
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating or not ctx.edits:
            return
        for facts in ctx.facts.units.values():
            before = _used(facts.module)
            after = _used(apply(facts.module, ctx.edits))
            for stmt in facts.module.body:
                if not (isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)):
                    continue
                if stmt in ctx.edits.removed or ctx.is_skipped(stmt):
                    continue
                gone = [(small, alias) for small in stmt.body if isinstance(small.names, (list, tuple))  # type: ignore[union-attr]
                        for alias in small.names if _reads(small, alias, before) and not _reads(small, alias, after)]  # type: ignore[union-attr]
                if not gone:
                    continue
                dropped = {_key(alias) for _, alias in gone}
                left = [s for s in stmt.body if any(_key(a) not in dropped for a in s.names)]  # type: ignore[union-attr]
                if not left:
                    ctx.remove(stmt)
                else:
                    ctx.replace(stmt, stmt, lambda n, d=dropped: _without(n, d))  # type: ignore[misc]
                ctx.change("drop the imports only the removed code used")


def _bound(small: cst.Import | cst.ImportFrom, alias: cst.ImportAlias) -> str:
    """What the alias makes readable: its ``as`` name, the imported name, or for ``import a.b.c`` the whole path."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return code_of(alias.name) if isinstance(small, cst.Import) else code_of(alias.name).split(".")[0]


def _reads(small: cst.Import | cst.ImportFrom, alias: cst.ImportAlias, used: set[str]) -> bool:
    name = _bound(small, alias)
    return any(u == name or u.startswith(name + ".") for u in used)


def _used(module: cst.Module) -> set[str]:
    """Every dotted name the code reads (``torch.utils.data.DataLoader``, ``dist``), outside import statements."""
    names: set[str] = set()

    def enter(node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Import, cst.ImportFrom, cst.Name)):
            if isinstance(node, cst.Name):
                names.add(node.value)
            return False
        if isinstance(node, cst.Attribute):
            name = dotted(node)
            if name is not None:
                names.add(name)
                return False
        return True

    for _ in descendants(module, enter):
        pass
    return names


def _key(alias: cst.ImportAlias) -> str:
    return code_of(alias.with_changes(comma=cst.MaybeSentinel.DEFAULT))


def _without(node: cst.CSTNode, dropped: set[str]) -> cst.CSTNode:
    """The import line without the dropped names (the last kept one loses its comma)."""
    assert isinstance(node, cst.SimpleStatementLine)
    body = []
    for small in node.body:
        names = [a for a in small.names if _key(a) not in dropped]  # type: ignore[union-attr]
        if not names:
            continue
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        body.append(small.with_changes(names=names))
    return node.with_changes(body=body)
