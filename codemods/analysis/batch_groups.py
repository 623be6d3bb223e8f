"""An evaluation loop that takes each batch as one group whose first row is special.

``for batch in test_loader: item = batch["item"].long().cuda(); ...; HR.append(hit(item[0], recommend))`` (the
much-copied NCF evaluation, set U's U2: each batch holds one user's positive item first and 99 negatives, and the
metric ranks the positive among them): the batch is a sample of its own, its first row read by position. Sharded,
each process would still hold whole batches, but their per-batch values are lists no gather can even out, and split
per original batch (``batch_tails``) the first row is another's. The data plan leaves such an evaluation loader out of
``prepare``: every process walks it whole, as the original did, and the metric is the original's on every process.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop

# what a batch value goes through and stays the same rows: a cast, a move, a key
_SAME_ROWS = ("long", "float", "int", "double", "half", "bool", "to", "cuda", "cpu", "detach", "contiguous")


def first_row(loop: Loop) -> cst.Subscript | None:
    """The first ``x[0]`` in ``loop``'s body, ``x`` one of the loop's targets or a name bound in the body to a target
    through casts, moves and keys only (``item = batch["item"].long().cuda()``); None where there is none."""
    node = loop.node
    if not isinstance(node, cst.For) or not isinstance(node.body, cst.IndentedBlock):
        return None
    # ``for x, item in loader``: each target a batch's tensor; ``for batch in loader``: the collated batch itself
    # (``batch[0]`` its first field), whose keyed values are tensors (``batch["item"]``)
    whole = {node.target.value} if isinstance(node.target, cst.Name) else set()
    rows = set(loop.targets) - whole
    for stmt in node.body.body:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) \
                    and _same_rows(assign.value, rows, whole):
                rows.add(assign.targets[0].target.value)
    for sub in m.findall(node.body, m.Subscript(value=m.Name())):
        assert isinstance(sub, cst.Subscript) and isinstance(sub.value, cst.Name)
        if sub.value.value in rows and len(sub.slice) == 1 and m.matches(sub.slice[0].slice, m.Index(value=m.Integer("0"))):
            return sub
    return None


def _same_rows(value: cst.BaseExpression, rows: set[str], whole: set[str]) -> bool:
    """``batch["item"].long().cuda()``: a batch's tensor (``rows``), or a keyed value of the collated batch
    (``whole``), through casts and moves only."""
    keyed = False
    while True:
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _SAME_ROWS:
            value = value.func.value
        elif isinstance(value, cst.Subscript) and len(value.slice) == 1 \
                and m.matches(value.slice[0].slice, m.Index(value=m.SimpleString())):
            value, keyed = value.value, True
        else:
            return isinstance(value, cst.Name) and (value.value in rows or (keyed and value.value in whole))
