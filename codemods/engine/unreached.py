"""Warnings about code no run of the program reaches in the local modules the entry imports: a module-level function
of theirs that nothing calls or names (``Predict`` in an ``engine.py`` whose entry calls only ``Train``; a course's
``helper.test_network`` its notebook never calls; a ``create_validation_set`` kept for later). What it leaves runs on
no process of this program, and a module shared by several entry scripts holds code for the others (converted on
their own): such warnings told the user of a problem this conversion does not have, and are dropped. The entry
script's own unused functions are still reported (its code is this program's), and a refusal is never dropped."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.plan import Plan
from accelify.codemods.engine.context import Located


class _Ids(cst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.ids.add(id(node))
        return True


def reached(plan: Plan, warnings: list[Located]) -> list[Located]:
    """``warnings`` less those about nodes inside a local module's function ``plan.never_run`` says nothing runs."""
    if not warnings:
        return warnings
    inside = _Ids()
    for scope in plan.facts.scopes:
        if scope.kind == "function" and scope.unit != "__main__" and plan.never_run(scope):
            scope.node.visit(inside)
    return [(node, warning) for node, warning in warnings if id(node) not in inside.ids]
