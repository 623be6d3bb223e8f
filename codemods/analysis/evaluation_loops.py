"""Which loops evaluate a prepared model (a forward over a prepared loader and no backward), and the forward pass
in a statement of one (``rules/evaluation.py``)."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Facts, Loop, Scope
from accelify.codemods.analysis.plan import Plan


def is_evaluation(plan: Plan, loop: Loop) -> bool:
    """A loop over a prepared loader that runs a prepared model and never calls backward: under
    ``no_grad``/``inference_mode``, with only its forward under one (``with torch.no_grad(): outputs =
    model(**batch)``), or with neither in a function that put the model in ``eval()`` mode and takes no
    gradient or optimizer step in the loop."""
    if plan.loader_of(loop) is None or any(plan.reaches_backward(site) for site in loop.calls):
        return False
    forwards = [site for site in loop.calls if is_model(plan, loop.scope, site.node.func, site.stmt)]
    if loop.no_grad or any(site.no_grad for site in forwards):
        return True
    if not forwards or any(site.method == "step" or site.qualname == "torch.autograd.grad" for site in loop.calls):
        return False
    return any(
        site.method == "eval" and is_model(plan, loop.scope, site.node.func.value, site.stmt)  # type: ignore[attr-defined]
        for site in loop.scope.calls
    )


def is_model(plan: Plan, scope: Scope, node: cst.BaseExpression, stmt: cst.BaseStatement) -> bool:
    """Whether ``node`` holds a prepared model in ``scope`` at ``stmt``."""
    return plan.prepared_model(scope, node, stmt) is not None


def model_call(plan: Plan, facts: Facts, loop: Loop, stmt: cst.BaseStatement) -> cst.Call | None:
    """The first call of a prepared model in ``stmt`` (the forward pass), or None."""
    first, last = facts.order[stmt]
    for site in loop.calls:
        if site.stmt in facts.order and first <= facts.order[site.stmt][0] <= last:
            if is_model(plan, loop.scope, site.node.func, site.stmt):
                return site.node
    return None
