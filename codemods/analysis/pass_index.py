"""A loop that pairs a list of its own with each batch by the loop's ``enumerate`` index.

``for index, (data, label) in enumerate(test_loader): ... names[index]`` (set U's U1: each prediction written beside
its file's name): the index is the batch's place in the data set only when one process walks all of it. The data
plan leaves such an evaluation loader out of ``prepare`` (every process walks it whole, as the original did); where
it is prepared anyway, the pass-indexed rule reports it (ACC065).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.names import dotted


def indexed_subscript(loop: Loop) -> tuple[cst.Subscript, str, str] | None:
    """The first ``held[index]`` in ``loop``'s body, ``index`` the loop's ``enumerate`` index and ``held`` a name
    (or attribute) the loop does not bind, with ``held`` and ``index``; else None."""
    node = loop.node
    if not (isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and m.matches(node.iter.func, m.Name("enumerate"))
            and isinstance(node.target, cst.Tuple) and node.target.elements
            and isinstance(node.target.elements[0].value, cst.Name)):
        return None
    index = node.target.elements[0].value.value
    bound = set(loop.targets) | {n.value for t in m.findall(node.body, m.AssignTarget()) for n in m.findall(t, m.Name())}  # type: ignore[attr-defined]
    for sub in m.findall(node.body, m.Subscript()):
        assert isinstance(sub, cst.Subscript)
        if len(sub.slice) != 1 or not m.matches(sub.slice[0].slice, m.Index(value=m.Name(index))):
            continue
        held = dotted(sub.value)  # ``names[index]``, ``dataset_test.spects[index]`` (U1)
        if held is not None and held.split(".", 1)[0] not in bound:
            return sub, held, index
    return None
