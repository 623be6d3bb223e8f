"""Evaluation loops over a prepared loader whose outputs must not be gathered (``rules/evaluation.py`` asks before it
gathers).

- Batches of one sample (N4's dependency parser: one unpadded sentence per batch, ``heads[0]`` or ``[:, 1:]``, a
  DataLoader with batch size 1): gathered, the processes' samples may have other shapes (the gather fails) and
  ``scores[0]`` would read process 0's alone.
- An output read whole as one number (``test_loss += loss.item()``: O4's diffusion wrapper returns its own mean loss):
  gathered it is N numbers, with no batch to split per original batch.

Where what the loop computes from the outputs ends in running sums the averages rule reduces after the loop, nothing is
gathered (``REDUCED``); otherwise the metric is reported as local (``REPORTED``; a loader of one sample per batch whose
outputs are kept in a list is gathered as before).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.reduced_outputs import feeds_reduced_sums_only
from accelify.codemods.analysis.shard_sums import find_averages

REDUCED = "reduced"
REPORTED = "reported"


def counted_here(plan: Plan, loop: Loop, stmt: cst.BaseStatement, named: list[str],
                 rest: list[cst.BaseStatement]) -> str | None:
    """``REDUCED`` or ``REPORTED`` where the outputs ``named`` (bound by the forward ``stmt``, followed by ``rest`` in
    the loop's body) must not be gathered; None where the gather is right."""
    if one_per_batch(plan, loop) and sums_only(plan, loop) and feeds_reduced_sums_only(plan, loop, stmt, rest):
        return REDUCED
    if one_sample(plan, loop, rest) or scalar_output(named, rest):
        return REDUCED if feeds_reduced_sums_only(plan, loop, stmt, rest) else REPORTED
    return None


def one_sample(plan: Plan, loop: Loop, rest: list[cst.BaseStatement]) -> bool:
    """Whether the loop body reads a batch tensor's first row by a literal index (``gold = heads[0].numpy()``): it
    takes each batch for one sample."""
    batch = plan.batch_names(loop)
    for stmt in rest:
        for node in m.findall(stmt, m.Subscript(value=m.Name(), slice=[m.SubscriptElement(slice=m.Index(m.Integer("0")))])):
            if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value in batch:
                return True
    return False


def scalar_output(named: list[str], rest: list[cst.BaseStatement]) -> bool:
    """Whether the loop reads an output of the forward whole as one number (``test_loss += loss.item()``)."""
    return any(m.findall(stmt, m.Call(func=m.Attribute(value=m.OneOf(*(m.Name(n) for n in named)), attr=m.Name("item"))))
               for stmt in rest)


def one_per_batch(plan: Plan, loop: Loop) -> bool:
    """Whether the loop walks a ``DataLoader`` built with one sample per batch (``batch_size=1``, or none given: the
    default), whose samples may each have a shape of their own (sentences of other lengths)."""
    loader = plan.loader_of(loop)
    call = loader.value if loader is not None else None
    if not (isinstance(call, cst.Call) and loader is not None
            and loader.where.imports.qualname(call.func) == "torch.utils.data.DataLoader"):
        return False
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    if "batch_sampler" in keywords or any(a.star for a in call.args):
        return False
    size = keywords.get("batch_size", positional[1] if len(positional) > 1 else None)
    return size is None or m.matches(size, m.Integer("1"))


def sums_only(plan: Plan, loop: Loop) -> bool:
    """Whether what the loop keeps is running sums the averages rule reduces, and no list of values (``ys.append``)."""
    found = plan.analysis(find_averages)
    return not any(k.loop.node is loop.node for k in found.kept) and any(
        acc.loop.node is loop.node for acc in found.accumulators)
