"""A running sum read inside its loop by a value that is read after it: where the reduction may go.

``acc = correct / len(data)`` in the batch loop and ``print(acc)`` after it (marcinl/titanic-dnn) reads the sum
nowhere after the loop, yet what is printed is computed from it: one process's share on N processes. Reduced in the
loop at every batch, a sum would count the other processes' batches again at the next; so the value is computed
again after the loop, from the reduced sum, where ``analysis/shard_sums.py`` places the reduction. That is the
original's value when the statement that computes it runs at every batch (a statement of the loop's own body), after
every addition to the sum, reads nothing the loop sets but sums, and nothing else in the loop sets the name it binds. Anything else (the value computed
under a condition, before an addition, bound twice) cannot be placed, and the sum is reported.

Also here: whether an addition to the sum counts samples rather than batches (``correct += 1`` in a loop over the
batch's outputs), so that it is summed, not taken for a batch counter.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.plan import Plan


def derived_reads(plan: Plan, loop: Loop, name: str, updates: list[cst.BaseStatement]) -> tuple[cst.BaseStatement, ...] | None:
    """The statements of ``loop`` that compute from ``name`` a value read after the loop, when each can be run again
    after it (see the module docstring); ``()`` when no value read after the loop is computed from ``name``; None
    when one is but cannot be computed again."""
    scope = loop.scope
    found: list[cst.BaseStatement] = []
    for stmt in loop.stmts:
        if stmt in updates or not isinstance(stmt, cst.SimpleStatementLine) or not m.findall(stmt, m.Name(name)):
            continue
        bound = _bound(stmt)
        if not any(_read_after(plan, loop, b) for b in bound):
            continue  # read in the loop only (a running value printed every N steps: one process's, by convention)
        if not _recomputable(plan, loop, stmt, name, updates):
            return None
        found.append(stmt)
    if found and any(len([b for b in scope.bindings.get(t, []) if b.loop is loop or _inside(plan, b.stmt, loop)]) != 1
                     for s in found for t in _bound(s)):
        return None  # bound again elsewhere in the loop: the value after the loop may not be this statement's
    return tuple(found)


def counts_samples(plan: Plan, loop: Loop, stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` sits in a loop nested in ``loop`` (``for idx, p in enumerate(out): ... correct += 1``): a
    ``+= 1`` there counts items of a batch, not the batches."""
    for holder in plan.facts.chain(stmt)[1:]:
        if holder is loop.node:
            return False
        if isinstance(holder, (cst.For, cst.While)):
            return True
    return False


def inner_stmts(plan: Plan, loop: Loop) -> list[cst.BaseStatement]:
    """The statements of the loops nested in ``loop`` (``for idx, p in enumerate(out):``), none of which walks a
    prepared loader of its own."""
    found: list[cst.BaseStatement] = []
    for inner in plan.facts.loops:
        path, node = [], inner
        while node is not None and node is not loop:
            path.append(node)
            node = node.parent
        if node is loop and path and all(plan.loader_of(p) is None for p in path):
            found += inner.stmts
    return found


def in_else(plan: Plan, stmt: cst.BaseStatement, loop: cst.For | cst.While) -> bool:
    """Whether ``stmt`` is in ``loop``'s ``else:`` clause (run once the loop is done, unless it breaks)."""
    if loop.orelse is None:
        return False
    clause = loop.orelse.body
    body = clause.body if isinstance(clause, cst.IndentedBlock) else ()
    return any(s in body for s in plan.facts.chain(stmt))


def else_placeable(loop: cst.For | cst.While) -> bool:
    """Whether a reduction can go first in ``loop``'s ``else:`` clause, and so before everything that reads the
    sum there and after the loop: a clause of its own lines, and no ``break`` that would skip it."""
    return loop.orelse is not None and isinstance(loop.orelse.body, cst.IndentedBlock) and not m.findall(loop.body, m.Break())


def _recomputable(plan: Plan, loop: Loop, stmt: cst.SimpleStatementLine, name: str, updates: list[cst.BaseStatement]) -> bool:
    """``target = <expression>`` in the loop's own body, after every addition to ``name``."""
    if plan.facts.parent_stmt.get(stmt) is not loop.node or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
        return False
    if m.findall(small.value, m.NamedExpr() | m.Yield() | m.Await()) or small.targets[0].target.value == name:
        return False
    skip = {id(a.attr) for a in m.findall(small.value, m.Attribute())} | {id(a.keyword) for a in m.findall(small.value, m.Arg()) if a.keyword}
    for read in m.findall(small.value, m.Name()):
        if id(read) in skip:
            continue
        bound = loop.scope.bindings.get(read.value, [])  # type: ignore[attr-defined]
        if any(not b.aug and (b.stmt is loop.node or _inside(plan, b.stmt, loop)) for b in bound):
            return False  # ``acc = correct / x.size(0)``: a value of the last batch, this process's own
    return all(plan.facts.after(stmt, u) for u in updates)


def _bound(stmt: cst.SimpleStatementLine) -> set[str]:
    names: set[str] = set()
    for small in stmt.body:
        if isinstance(small, cst.Assign):
            for t in small.targets:
                names |= set(target_names(t.target))
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            names |= set(target_names(small.target))
    return names


def _inside(plan: Plan, stmt: cst.BaseStatement, loop: Loop) -> bool:
    return any(s is loop.node for s in plan.facts.chain(stmt)[1:])


def reads_after(plan: Plan, node: cst.BaseStatement, scope: Scope, name: str, else_clause: bool = True
                ) -> list[cst.BaseStatement]:
    """The statements of ``scope`` after ``node`` that read ``name`` (and, with ``else_clause``, those in the
    ``else:`` clause of ``node`` when it is a loop: ``for ... else: print(tot)``)."""
    out = []
    for ref in scope.refs.get(name, []):
        holder = scope.holders.get(id(ref))
        if holder is None or holder in out:
            continue
        if plan.facts.after(holder, node) or (
                else_clause and isinstance(node, (cst.For, cst.While)) and in_else(plan, holder, node)):
            out.append(holder)
    return out


def _read_after(plan: Plan, loop: Loop, name: str) -> bool:
    return bool(reads_after(plan, loop.node, loop.scope, name, else_clause=False))
