"""Arrays sized by the data set, filled row by row from a loop over a prepared loader.

``embeddings = np.zeros((len(loader.dataset), 2))`` before the loop, ``embeddings[k:k + len(images)] = ...`` and
``k += len(images)`` in it (siamese-triplet's ``extract_embeddings``, copied widely): on N processes each process walks
1/N of the batches, so it fills the first 1/N of the rows and the rest stay as they were made (zeros), with no error.
The evaluation rule gathers an evaluation loop's outputs and batch (``k`` then counts every process's rows, and the
rows fill up); where nothing is gathered, ``find_averages`` keeps the write as a value it cannot make whole and the
averages rule reports it (ACC028), unless what is written is global.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan


@dataclass(frozen=True)
class RowWrite:
    """``name[start:stop] = value`` in ``loop``, ``name`` made before it with the data set's length."""

    name: str
    stmt: cst.BaseStatement
    value: cst.BaseExpression


def row_writes(plan: Plan, loop: Loop) -> list[RowWrite]:
    """The slice assignments of ``loop``'s own statements into arrays sized by a data set's length."""
    found: list[RowWrite] = []
    for stmt in loop.stmts:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        for target in assign.targets:
            node = target.target
            if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name)
                    and any(isinstance(e.slice, cst.Slice) for e in node.slice)):
                continue
            name = node.value.value
            if _sized_by_data(plan, loop, name):
                found.append(RowWrite(name, stmt, assign.value))
    return found


def _sized_by_data(plan: Plan, loop: Loop, name: str) -> bool:
    """Whether ``name`` is made in ``loop``'s scope before it by a call given a data set's length
    (``len(loader.dataset)``, ``len(test_set)`` of the data set a loader of the program is built on)."""
    start = plan.facts.order[loop.node][0]
    made = [b for b in loop.scope.bindings.get(name, [])
            if not b.aug and isinstance(b.value, cst.Call) and plan.facts.order[b.stmt][1] < start]
    if not made:
        return False
    datasets = _dataset_names(plan)
    for length in m.findall(made[-1].value, m.Call(func=m.Name("len"))):  # type: ignore[arg-type]
        args = length.args  # type: ignore[attr-defined]
        key = dotted(args[0].value) if args else None
        if key is not None and (key.endswith(".dataset") or key in datasets):
            return True
    return False


def _dataset_names(plan: Plan) -> set[str]:
    """The names the program's data loaders are built on (``DataLoader(test_set, ...)``: ``test_set``)."""
    names = set()
    for loader in plan.bindings_with_role("loader"):
        value = loader.value
        if isinstance(value, cst.Call) and value.args and value.args[0].keyword is None:
            key = dotted(value.args[0].value)
            if key is not None:
                names.add(key)
    return names
