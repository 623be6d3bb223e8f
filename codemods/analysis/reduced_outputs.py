"""Whether an evaluation forward the loop cannot gather feeds only running sums that are reduced after the loop.

``if args.use_labels: loss = model(x, y)`` / ``else: loss = model(x)`` then ``test_loss += loss.item()``: the
forward's statement holds two calls, so ``rules/evaluation.py`` cannot gather its output; but every value computed
from it ends in ``test_loss``, a running sum over the prepared loader that ``rules/averages.py`` reduces across
processes right after the loop (``analysis/shard_sums.py`` finds it). The metric read after the loop is then the whole
data set's, not a process's share, and there is nothing to report about the forward (ACC016 would be false).

What this proves, and nothing more: the names the forward's statement binds are read, in the rest of the loop's body,
only by plain assignments to other names (followed the same way) and by updates of running sums the analysis reduces
(not summed in a helper, ``local``); none of them is read after the loop. Anything else that reads them (a list, a
print in the loop, a condition, a nested statement) keeps the warning.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.shard_sums import find_averages
from accelify.codemods.analysis.statement_shapes import target_names


def feeds_reduced_sums_only(plan: Plan, loop: Loop, stmt: cst.BaseStatement, rest: Sequence[cst.BaseStatement]) -> bool:
    """Whether what ``stmt`` (a forward in ``loop``'s body, followed there by ``rest``) binds reaches only running
    sums reduced after the loop (see the module docstring)."""
    tainted = assigned_names(stmt)
    if not tainted:
        return False
    found = plan.analysis(find_averages)
    updates = {
        id(update) for acc in found.accumulators if acc.loop.node is loop.node and not acc.local for update in acc.updates
    }
    summed = False
    for later in rest:
        if not read_names(later) & tainted:
            continue
        if id(later) in updates:
            summed = True
        elif _unread_sum(plan, loop, later):
            continue  # ``loss += loss_func(scores, heads).item()`` that nothing reads after the loop
        elif plain_assignment(later):
            tainted |= assigned_names(later)
        else:
            return False
    return summed and not any(reads_after(plan, loop.node, loop.scope, name) for name in tainted)


def assigned_names(stmt: cst.BaseStatement) -> set[str]:
    """The names ``stmt`` assigns, in any of its branches (``loss`` of ``if a: loss = f(x)`` / ``else: loss = g(x)``)."""
    names: set[str] = set()
    for assign in m.findall(stmt, m.Assign()):
        assert isinstance(assign, cst.Assign)
        for target in assign.targets:
            names |= set(target_names(target.target))
    return names


def plain_assignment(stmt: cst.BaseStatement) -> bool:
    """``value = loss.item()``: one assignment to names, nothing else on the line."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return False
    return all(isinstance(t.target, (cst.Name, cst.Tuple)) for t in stmt.body[0].targets)


def read_names(stmt: cst.CSTNode) -> set[str]:
    """The names ``stmt`` mentions (attribute names and keywords excluded)."""
    skip = {id(a.attr) for a in m.findall(stmt, m.Attribute())} | {
        id(a.keyword) for a in m.findall(stmt, m.Arg()) if isinstance(a, cst.Arg) and a.keyword is not None
    }
    return {n.value for n in m.findall(stmt, m.Name()) if isinstance(n, cst.Name) and id(n) not in skip}


def _unread_sum(plan: Plan, loop: Loop, stmt: cst.BaseStatement) -> bool:
    """``total += ...`` to a name nothing reads after the loop: it decides nothing on any process."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.AugAssign)):
        return False
    target = stmt.body[0].target
    return isinstance(target, cst.Name) and not reads_after(plan, loop.node, loop.scope, target.value)
