"""Which loops evaluate a prepared model (a forward over a prepared loader and no backward), and the forward pass
in a statement of one (``rules/evaluation.py``)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Facts, Loop, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import strip_placement


def is_evaluation(plan: Plan, loop: Loop) -> bool:
    """A loop over a prepared loader that runs a prepared model and never calls backward: under
    ``no_grad``/``inference_mode``, with only its forward under one (``with torch.no_grad(): outputs =
    model(**batch)``), or with neither in a function that put the model in ``eval()`` mode and takes no
    gradient or optimizer step in the loop."""
    if plan.loader_of(loop) is None or any(plan.reaches_backward(site) for site in loop.calls):
        return False
    forwards = [site for site in loop.calls if is_forward(plan, loop, site.node, site.stmt)]
    if loop.no_grad or any(site.no_grad for site in forwards):
        return True
    if not forwards or any(site.method == "step" or site.qualname == "torch.autograd.grad" for site in loop.calls):
        return False
    return any(
        site.method == "eval" and is_model(plan, loop.scope, site.node.func.value, site.stmt)  # type: ignore[attr-defined]
        for site in loop.scope.calls
    )


def is_forward(plan: Plan, loop: Loop, call: cst.Call, stmt: cst.BaseStatement) -> bool:
    """Whether ``call`` runs a prepared model on the loop's batch: ``model(x)``, or, in a loop that never calls the
    model itself, a method the model's own class defines given (part of) the batch (siamese-triplet's
    ``model.get_embedding(images)``, an ``encode``, a ``predict``): a forward of the model's layers all the same,
    whose per-batch outputs are this process's share (``model.init_hidden(bsz)`` is given no batch: not one)."""
    if is_model(plan, loop.scope, call.func, stmt):
        return True
    func = call.func
    if not isinstance(func, cst.Attribute) or _calls_model(plan, loop):
        return False
    found = plan.prepared_model(loop.scope, func.value, stmt)
    value = strip_placement(found.value) if found is not None and found.value is not None else None
    if not isinstance(value, cst.Call):
        return False
    cls = plan.classes.class_of(found.where, value.func)  # type: ignore[union-attr]
    if cls is None or plan.classes.method(cls, func.attr.value) is None:
        return False
    names = {n.value for a in call.args for n in m.findall(a.value, m.Name())}  # type: ignore[attr-defined]
    return any(plan.is_batch(loop.scope, n, loop) for n in names)


def _calls_model(plan: Plan, loop: Loop) -> bool:
    """Whether the loop calls a prepared model itself (``model(x)``) anywhere."""
    return any(is_model(plan, loop.scope, site.node.func, site.stmt) for site in loop.calls)


def is_model(plan: Plan, scope: Scope, node: cst.BaseExpression, stmt: cst.BaseStatement) -> bool:
    """Whether ``node`` holds a prepared model in ``scope`` at ``stmt``."""
    return plan.prepared_model(scope, node, stmt) is not None


def model_call(plan: Plan, facts: Facts, loop: Loop, stmt: cst.BaseStatement) -> cst.Call | None:
    """The first call of a prepared model in ``stmt`` (the forward pass), or None."""
    found = model_calls(plan, facts, loop, stmt)
    return found[0] if found else None


def model_calls(plan: Plan, facts: Facts, loop: Loop, stmt: cst.BaseStatement) -> list[cst.Call]:
    """Every call of a prepared model in ``stmt`` but those inside another one, in order (``triplet_loss(model(a),
    model(p), model(n))``: three forward passes). The calls come in the order they are written, outer ones first, so
    the first is never inside another."""
    first, last = facts.order[stmt]
    found = [site.node for site in loop.calls
             if site.stmt in facts.order and first <= facts.order[site.stmt][0] <= last
             and is_forward(plan, loop, site.node, site.stmt)]
    return [c for c in found if not any(o is not c and any(n is c for n in m.findall(o, m.Call())) for o in found)]
