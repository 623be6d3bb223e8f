"""A list of per-batch summaries (dicts of numbers) over a sharded loader, summarised after the pass.

Stanford CS230's project template, and the many programs copied from it, keep every k-th batch's metrics as a dict
(``summary_batch = {metric: metrics[metric](out, labels) for metric in metrics}``, ``summ.append(summary_batch)``)
and average each key after the pass (``{m: np.mean([x[m] for x in summ]) for m in summ[0]}``). Over a prepared
loader each process holds the summaries of its own batches only, so the mean printed is one process's share. The
averages rule gathers the list after the pass (``accelerator.gather_for_metrics(summ, use_gather_object=True)``:
every process's dicts in one list, in both runtimes) when every read of it is such an order-free summary.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan

OBJECT_LIST = "object list"
# summaries that do not depend on the order or the number of the list's entries in a way one process could tell
_SUMMARIES = {"numpy.mean", "numpy.average", "numpy.median", "numpy.nanmean", "statistics.mean", "statistics.fmean",
              "statistics.median"}


def appends_summaries(plan: Plan, loop: Loop, call: cst.Call, name: str) -> bool:
    """``summ.append(summary_batch)`` in ``loop`` (also under an ``if`` of it, not in a loop nested in it), where
    the value is a dict made in the loop (a display or a comprehension, directly or through the name it is bound
    to), and nothing else in the loop mentions ``summ``."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "append" and len(call.args) == 1
            and call.args[0].keyword is None) or m.findall(loop.node.body, m.Break()):
        return False
    value = call.args[0].value
    if isinstance(value, cst.Name):
        bound = [s.body[0].value for s in loop.stmts  # type: ignore[attr-defined]
                 if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign)
                 and any(m.matches(t.target, m.Name(value.value)) for t in s.body[0].targets)]
        if len(bound) != 1:
            return False
        value = bound[0]
    if not isinstance(value, (cst.Dict, cst.DictComp)):
        return False
    mentions = [s for s in loop.stmts if isinstance(s, cst.SimpleStatementLine) and m.findall(s, m.Name(name))]
    if len(mentions) != 1:
        return False
    for above in plan.facts.chain(mentions[0])[1:]:
        if above is loop.node:
            return True
        if isinstance(above, (cst.For, cst.While)):
            return False  # appended in an inner loop: its count is not one per batch
    return False


def summarised(scope: Scope, stmt: cst.BaseStatement, name: str) -> bool:
    """Every load of ``name`` in ``stmt`` is ``name[0]`` (the keys every entry has) or the iterable of a
    comprehension that is handed whole to an order-free summary (``np.mean([x[m] for x in summ])``)."""
    uses = {id(n) for n in m.findall(stmt, m.Name(name))}
    allowed: set[int] = set()
    for sub in m.findall(stmt, m.Subscript(value=m.Name(name))):
        assert isinstance(sub, cst.Subscript)
        if len(sub.slice) == 1 and m.matches(sub.slice[0].slice, m.Index(value=m.Integer("0"))):
            allowed.add(id(sub.value))
    for call in m.findall(stmt, m.Call()):
        assert isinstance(call, cst.Call)
        qualname = scope.imports.qualname(call.func) or dotted(call.func)
        if qualname not in _SUMMARIES or len(call.args) < 1:
            continue
        comp = call.args[0].value
        if isinstance(comp, (cst.ListComp, cst.GeneratorExp)) and isinstance(comp.for_in.iter, cst.Name) \
                and comp.for_in.iter.value == name and comp.for_in.inner_for_in is None:
            allowed.add(id(comp.for_in.iter))
    return bool(uses) and uses <= allowed
