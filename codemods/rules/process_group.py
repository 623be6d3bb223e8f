"""RemoveProcessGroup: the launcher and the accelerator set up the processes, so the script's own set-up goes.

- ``dist.init_process_group(...)`` and ``dist.destroy_process_group()`` go (``accelerator.end_training()``
  ends the run); ``torch.cuda.set_device(local_rank)`` is the device rule's;
- a branch the script runs only when it distributes itself, on a *mode flag* with no counterpart in the
  runtime (``if args.distributed:``, ``elif args.distributed:``), goes whole when all it does is that set-up
  (the DDP wrap, the sampler, placement on its device) and per-process arithmetic on the process count or
  rank (``args.rank = args.rank * ngpus_per_node + gpu``, ``args.batch_size = int(args.batch_size /
  ngpus_per_node)``: with one way of being distributed the accelerator's processes and ``split_batches``
  stand for it); when the flag's ``else:`` does something of its own, that is what remains.

Anything else in such a branch has no place in the converted script: the file is refused (ACC003).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.distributed import INIT, SET_DEVICE, Distributed
from accelify.codemods.analysis.launcher_values import QUERIES
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.names import ImportMap, dotted
from accelify.codemods.analysis.roles import LOADERS
from accelify.codemods.engine.rule import Example, Rule

_COUNTS = ("torch.cuda.device_count",)  # what the hand-written set-up divides by


class RemoveProcessGroup(Rule):
    name = "process_group"
    description = "Drop init_process_group/destroy_process_group and the branches that only set up distribution by hand."
    examples = (
        Example(
            before='''\
import argparse
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
parser.add_argument("--batch-size", type=int, default=4)
args = parser.parse_args()
if args.distributed:
    dist.init_process_group("gloo")
    args.batch_size = args.batch_size // dist.get_world_size()
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=args.batch_size)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    model(x).sum().backward()
    optimizer.step()
if args.distributed:
    dist.destroy_process_group()
''',
            after='''\
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(split_batches=True)
parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
parser.add_argument("--batch-size", type=int, default=4)
args = parser.parse_args()
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=args.batch_size)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for (x,) in loader:
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import argparse
import torch
parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
args = parser.parse_args()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if args.distributed:
    print("distributed")
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import argparse
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
parser = argparse.ArgumentParser()
parser.add_argument("--distributed", action="store_true")
args = parser.parse_args()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
if args.distributed:
    accelerator.print("distributed")
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        found = ctx.plan.distributed
        if not found or not ctx.accelerating:
            return
        for site in found.setup:
            stmt = site.stmt
            if _alone(stmt, site.node):
                ctx.remove(stmt)
                ctx.change("the launcher and the accelerator set up the processes")
            else:
                ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func),
                          fix="call it alone on its line, or remove it by hand")
        launchers = {id(s.scope) for s in found.spawns}
        counts, ranks = _counts_and_ranks(ctx, found)
        shares = _shares(ctx, found) | ranks
        for stmt in ctx.facts.order:
            if not isinstance(stmt, cst.If) or ctx.is_skipped(stmt):
                continue
            side = _distributed_side(stmt, found)
            if side is None:
                continue
            scope = found.scope_of(stmt)
            if scope is None or id(scope) in launchers:
                continue
            self._setup_branch(ctx, stmt, side, counts | ranks, shares)

    def _setup_branch(
        self, ctx: Context, stmt: cst.If, side: list[cst.BaseStatement], keys: set[str], shares: set[str]
    ) -> None:
        """Remove the set-up branch of ``if <mode flag>:`` (or keep only what its ``else`` does)."""
        leaves = [leaf for s in side for leaf in _leaves(s)]
        imports = ctx.facts.imports
        for leaf in leaves:
            if leaf in ctx.edits.removed or _per_process(leaf, keys, shares, imports) or _sets_device(leaf, imports):
                continue
            if _does_nothing(leaf):
                continue  # ``pass`` (under a comment such as ``# DDP would go here``): nothing distributed by hand
            ctx.abort(codes.MANUAL_DISTRIBUTED, leaf, name=f"{code_of(leaf).strip().splitlines()[0]}` in `if {code_of(stmt.test)}:",
                      fix="this runs only when the script distributes itself, which the converted script does not decide; "
                      "move it out of the branch or remove it")
        for leaf in leaves:
            ctx.remove(leaf)
        orelse = stmt.orelse
        if isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock):
            in_body = side == _body(stmt)
            other = _body(stmt) if not in_body else list(orelse.body.body)
            kept = [s for s in other if any(leaf not in ctx.edits.removed for leaf in _leaves(s))]
            parent = ctx.facts.parent_stmt.get(stmt)
            if kept and not (isinstance(parent, cst.If) and parent.orelse is stmt):
                # one way of being distributed: the script's other path, unconditionally
                ctx.regroup([stmt], _else_body if in_body else _if_body)
        ctx.change("the launcher and the accelerator set up the processes")


def _alone(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is call
    )


def _sets_device(stmt: cst.BaseStatement, imports: ImportMap) -> bool:
    """``torch.cuda.set_device(i)`` (the device rule removes it)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.Call) and imports.qualname(stmt.body[0].value.func) == SET_DEVICE
    )


def _body(stmt: cst.If) -> list[cst.BaseStatement]:
    return list(stmt.body.body) if isinstance(stmt.body, cst.IndentedBlock) else []


def _distributed_side(stmt: cst.If, found: Distributed) -> list[cst.BaseStatement] | None:
    """The statements ``if <mode flag>:`` runs when the script distributes itself (``if not <flag>: ... else:``
    runs its ``else``)."""
    test = stmt.test
    if dotted(test) in found.modes:
        return _body(stmt)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) and dotted(test.expression) in found.modes:
        if isinstance(stmt.orelse, cst.Else) and isinstance(stmt.orelse.body, cst.IndentedBlock):
            return list(stmt.orelse.body.body)
    return None


def _does_nothing(stmt: cst.BaseStatement) -> bool:
    """``pass``, ``...`` or a bare string."""
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, cst.Pass) or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.Ellipsis, cst.SimpleString)))
        for s in stmt.body
    )


def _leaves(stmt: cst.BaseStatement) -> list[cst.BaseStatement]:
    """The simple statements in ``stmt``, through every block (``if``/``else``/``with``/``try``)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return [stmt]
    out: list[cst.BaseStatement] = []
    for child in stmt.children:
        if isinstance(child, cst.IndentedBlock):
            for inner in child.body:
                out += _leaves(inner)
        elif isinstance(child, (cst.If, cst.Else, cst.ExceptHandler, cst.Finally)):
            out += _leaves(child) if isinstance(child, cst.If) else [x for b in child.body.body for x in _leaves(b)]  # type: ignore[attr-defined]
    return out


def _per_process(stmt: cst.BaseStatement, keys: set[str], shares: set[str], imports: ImportMap) -> bool:
    """``args.rank = args.rank * ngpus_per_node + gpu``, ``args.batch_size = int(args.batch_size / ngpus_per_node)``:
    the rank, or this process's share of the loader's batch or workers, computed from the process count or the
    rank (the accelerator's processes and ``split_batches`` stand for them). Any other value stays the author's."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted(small.targets[0].target):
        target, value = dotted(small.targets[0].target), small.value
    elif isinstance(small, cst.AugAssign) and dotted(small.target):
        target, value = dotted(small.target), small.value
    else:
        return False
    if target not in shares:
        return False
    reads = {dotted(n) for n in m.findall(value, m.Name() | m.Attribute())}  # type: ignore[arg-type]
    calls = {imports.qualname(c.func) for c in m.findall(value, m.Call())}  # type: ignore[attr-defined]
    return bool(reads & keys) or bool(calls & {*QUERIES, *_COUNTS})


def _shares(ctx: Context, found: Distributed) -> set[str]:
    """What a process's share is computed into: the ``batch_size=`` and ``num_workers=`` of the loaders, and the
    ``rank=`` given to ``init_process_group`` (it reads nothing else once the set-up goes)."""
    out: set[str] = set()
    for site in ctx.facts.calls:
        if site.qualname in LOADERS:
            out |= {dotted(a.value) or "" for a in site.node.args if a.keyword is not None and a.keyword.value in ("batch_size", "num_workers")}
        if site.qualname == INIT:
            out |= {dotted(a.value) or "" for a in site.node.args if a.keyword is not None and a.keyword.value == "rank"}
    return out - {""}


def _counts_and_ranks(ctx: Context, found: Distributed) -> tuple[set[str], set[str]]:
    """Names that hold the process count (``nprocs=`` of the spawn, as the worker receives it; ``world_size=`` of
    ``init_process_group``) and the rank (the spawned worker's first parameter, the launcher values)."""
    counts = {k for k, r in found.keys.items() if r.kind == "num_processes"}
    ranks = {k for k, r in found.keys.items() if r.kind != "num_processes"}
    for site in found.spawns:
        worker = _spawned(ctx, site)
        if worker is None:
            continue
        params = worker.param_names
        ranks.update(params[:1])
        nprocs = next((a.value for a in site.node.args if a.keyword is not None and a.keyword.value == "nprocs"), None)
        passed = next((a.value for a in site.node.args if a.keyword is not None and a.keyword.value == "args"), None)
        if nprocs is not None and isinstance(passed, cst.Tuple):
            for param, element in zip(params[1:], passed.elements):
                if code_of(element.value) == code_of(nprocs):
                    counts.add(param)
    for site in found.setup:
        if site.qualname == INIT:
            for arg in site.node.args:
                if arg.keyword is not None and arg.keyword.value == "world_size" and dotted(arg.value):
                    counts.add(dotted(arg.value) or "")
    return counts, ranks


def _spawned(ctx: Context, site: CallSite) -> Scope | None:
    if not site.node.args or not isinstance(site.node.args[0].value, cst.Name):
        return None
    name = site.node.args[0].value.value
    owner = site.scope.resolve(name)
    return ctx.facts.function(name, owner) if owner is not None else None


def _if_body(updated: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    (stmt,) = updated
    assert isinstance(stmt, cst.If) and isinstance(stmt.body, cst.IndentedBlock)
    body = list(stmt.body.body)
    body[0] = body[0].with_changes(leading_lines=[*stmt.leading_lines, *body[0].leading_lines])
    return body


def _else_body(updated: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    (stmt,) = updated
    assert isinstance(stmt, cst.If) and isinstance(stmt.orelse, cst.Else) and isinstance(stmt.orelse.body, cst.IndentedBlock)
    body = list(stmt.orelse.body.body)
    body[0] = body[0].with_changes(leading_lines=[*stmt.leading_lines, *body[0].leading_lines])
    return body
