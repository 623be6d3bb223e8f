"""StopTogether: an early stop on a value a process computed alone stops every process at the same point.

A ``break`` out of a training loop under a condition on a local value (a training loss, a local
metric) lets one process leave the loop while the others wait for it in the next backward: the run
hangs. ``break`` becomes ``accelerator.set_trigger()``, and right after the loop-body statement that
holds it, ``if accelerator.check_trigger(): break`` stops every process together as soon as any one of
them would have. On one process that is the original control flow. A ``break`` that is not the last
thing its statement runs, and a ``return`` out of a training loop on a local value, cannot be moved
like this: the file is refused with the reason. A test that skips a loader's short last batch, where that loader is
built with full batches only (``rules/full_batches.py``), never fires on any process: its ``break`` stays.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.tree_walk import children
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import statement
from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.short_batches import full_batch_tests
from accelify.codemods.engine.rule import Example, Rule


class StopTogether(Rule):
    name = "trigger"
    description = "Stop every process together when one of them breaks out of training on a local value."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    if total < 0.5:
        break
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(10):
    total = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        total += loss.item()
    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()
    if total < 0.5:
        accelerator.set_trigger()
    if accelerator.check_trigger():
        break
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if epoch == 3:
        break
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(10):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    if epoch == 3:
        break
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader, epochs=100):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if loss.item() < 1e-3:
            return epoch
    return epochs


loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(16, 1)
print("converged after", train(model, loader), "epochs")
''',
            warnings=("ACC017:14",),
        ),
    )

    def run(self, ctx: Context) -> None:
        full = full_batch_tests(ctx.plan, ctx.target)  # ``if len(y) != batch_size: break`` over full batches only
        for loop in ctx.facts.loops:
            accelerator = ctx.accelerator_in(loop.scope)
            if (accelerator is None and not ctx.edits.accelerators) or not self._trains(ctx, loop) \
                    or not isinstance(loop.node.body, cst.IndentedBlock):
                continue
            for top in loop.node.body.body:
                checked = False
                for exit_stmt, kind in _exits(top):
                    if ctx.is_skipped(exit_stmt) or id(top) in full or _agrees(ctx, loop.scope, exit_stmt, top):
                        continue
                    # no accelerator here to stop together with (a DQN script stepping its agent's prepared network
                    # in an episode loop that ends when the process's own environment terminates): refused
                    if accelerator is None or kind == "return" or not _last_to_run(ctx, exit_stmt, top) \
                            or ctx.agreement.collective_place(top, loop.scope) is None:  # check_trigger is a collective
                        ctx.abort(codes.LOCAL_EXIT, exit_stmt, what=kind)
                    ctx.replace(exit_stmt, exit_stmt, lambda s, a=accelerator: _set_trigger(s, a))  # type: ignore[misc]
                    if not checked:
                        ctx.insert_after(top, [f"if {accelerator}.check_trigger():\n    break\n"])
                        checked = True
                    ctx.change("stop every process together: set_trigger() / check_trigger()")

        _refuse_local_while(ctx)

    def _trains(self, ctx: Context, loop: Loop) -> bool:
        """A loop whose iterations reach a collective: a backward (DDP syncs gradients), or a gather."""
        return any(ctx.plan.reaches_backward(site) for site in loop.calls) or any(
            ctx.agreement.gathers(stmt) for stmt in loop.stmts
        )


def _refuse_local_while(ctx: Context) -> None:
    """A ``while`` loop that trains (a DQN's ``while True:`` over the steps of an episode, ``while not done:``) and
    ends on a value each process computes alone (its own environment's ``done``, a random draw): each process takes
    its own number of training steps, DDP pairs unrelated steps, and the first process to finish leaves the others
    waiting. Stopping them together would cut the other processes' episodes short, which is not the original's
    training either: the file is refused (ACC017)."""
    seen: set[int] = set()
    for site in ctx.facts.calls:
        if not ctx.plan.reaches_backward(site):
            continue
        for outer in ctx.facts.chain(site.stmt)[1:]:
            if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
                break
            if not isinstance(outer, cst.While) or id(outer) in seen:
                continue
            seen.add(id(outer))
            if not ctx.agreement.uniform(site.scope, outer.test, outer):
                ctx.abort(codes.LOCAL_EXIT, outer, what="while")
            for top in outer.body.body if isinstance(outer.body, cst.IndentedBlock) else ():
                for exit_stmt, kind in _exits(top):
                    if kind == "break" and not ctx.is_skipped(exit_stmt) and not _agrees(ctx, site.scope, exit_stmt, top):
                        ctx.abort(codes.LOCAL_EXIT, exit_stmt, what=kind)


def _exits(top: cst.BaseStatement) -> list[tuple[cst.SimpleStatementLine, str]]:
    """The ``break``/``return`` statements in ``top`` that leave the loop ``top`` is in: its breaks (not
    those of a loop nested in it) and every return (not those of a function defined in it)."""
    found: list[tuple[cst.BaseStatement, str]] = []
    pending: list[tuple[cst.CSTNode, bool]] = [(top, False)]
    while pending:
        node, inner = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.SimpleStatementLine):
            found += [(node, kind) for kind in _exit_kinds(node.body, inner)]
            continue
        if isinstance(node, cst.If):  # ``if done: break``, on one line: the ``if`` is the statement that exits
            suites = [node.body, node.orelse.body if isinstance(node.orelse, cst.Else) else None]
            found += [(node, kind) for suite in suites if isinstance(suite, cst.SimpleStatementSuite)
                      for kind in _exit_kinds(suite.body, inner)]
        nested = inner or isinstance(node, (cst.For, cst.While))
        pending.extend((child, nested) for child in children(node))
    return found


def _exit_kinds(body: Sequence[cst.BaseSmallStatement], inner: bool) -> list[str]:
    return ["break" if isinstance(small, cst.Break) else "return" for small in body
            if (isinstance(small, cst.Break) and not inner) or isinstance(small, cst.Return)]


def _agrees(ctx: Context, scope: Scope, exit_stmt: cst.BaseStatement, top: cst.BaseStatement) -> bool:
    """Whether every test between ``exit_stmt`` and ``top`` (included) agrees between processes (the test of a
    one-line ``if done: break`` too)."""
    if isinstance(exit_stmt, cst.If) and not ctx.agreement.uniform(scope, exit_stmt.test, exit_stmt):
        return False
    for outer in ctx.facts.chain(exit_stmt)[1:]:
        if isinstance(outer, (cst.If, cst.While)) and not ctx.agreement.uniform(scope, outer.test, outer):
            return False
        if outer is top:
            break
    return True


def _last_to_run(ctx: Context, exit_stmt: cst.BaseStatement, top: cst.BaseStatement) -> bool:
    """Whether nothing in ``top`` runs after ``exit_stmt`` (so replacing it by ``set_trigger()`` and
    breaking right after ``top`` runs the same statements)."""
    if exit_stmt is top:
        return True  # ``if done: break`` on one line, the loop body's statement itself
    node = exit_stmt
    for outer in ctx.facts.chain(exit_stmt)[1:]:
        block = _block_holding(outer, node)
        if block is None or block[-1] is not node:
            return False
        if isinstance(outer, (cst.For, cst.While, cst.Try)):
            return False  # a loop's else, or a finally, would run in between
        if outer is top:
            return True
        node = outer
    return False


def _block_holding(outer: cst.BaseStatement, node: cst.BaseStatement) -> list[cst.BaseStatement] | None:
    """The list of statements in ``outer`` (a body, an ``else``/``elif`` branch) that holds ``node``."""
    blocks: list[cst.BaseSuite] = []
    if isinstance(outer, (cst.If, cst.With, cst.For, cst.While, cst.Try)):
        blocks.append(outer.body)
    if isinstance(outer, cst.If) and outer.orelse is not None:
        orelse = outer.orelse
        blocks.append(orelse.body if isinstance(orelse, cst.Else) else cst.IndentedBlock([orelse]))
    for block in blocks:
        if isinstance(block, cst.IndentedBlock) and node in block.body:
            return list(block.body)
    if isinstance(outer, cst.If) and isinstance(outer.orelse, cst.If) and outer.orelse is node:
        return [node]
    return None


def _set_trigger(stmt: cst.CSTNode, accelerator: str) -> cst.CSTNode:
    """Each ``break`` of ``stmt`` (a statement line, or the one-line bodies of ``if done: break``) made
    ``accelerator.set_trigger()``."""
    call = statement(f"{accelerator}.set_trigger()")
    assert isinstance(call, cst.SimpleStatementLine)

    def swapped(suite: cst.BaseSuite) -> cst.BaseSuite:
        if not isinstance(suite, cst.SimpleStatementSuite):
            return suite
        return suite.with_changes(body=[call.body[0] if isinstance(s, cst.Break) else s for s in suite.body])

    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        if isinstance(orelse, cst.Else):
            orelse = orelse.with_changes(body=swapped(orelse.body))
        return stmt.with_changes(body=swapped(stmt.body), orelse=orelse)
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt.with_changes(body=[call.body[0] if isinstance(s, cst.Break) else s for s in stmt.body])

