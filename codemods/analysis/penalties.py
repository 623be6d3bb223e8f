"""Gradient penalties backwarded on their own: a shape DistributedDataParallel cannot reduce.

WGAN-GP written as three backwards per critic step (Zeleni9/pytorch-wgan, and the tutorials it follows)::

    d_loss_real.backward(mone)
    d_loss_fake.backward(one)
    gradient_penalty = self.calculate_gradient_penalty(real.data, fake.data)  # torch.autograd.grad(create_graph=True)
    gradient_penalty.backward()

The penalty's backward reaches no gradient of a parameter the input-gradient does not depend on (the critic's last
bias), while DDP waits for every parameter its forward used (``find_unused_parameters=True`` does not help: the bias
*is* in the forward graph). The run stops at the next forward on N processes. Summed into one loss first (stargan's
``d_loss = d_loss_real + ... + lambda_gp * d_loss_gp``; one backward), every parameter gets its gradient and DDP
reduces it; that shape is not this one.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.flow import Flow
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.snippets import code_of


def penalty_backward(flow: Flow, aside: Callable[[Scope], bool] = lambda scope: False) -> CallSite | None:
    """The ``backward`` call of a value ``torch.autograd.grad(..., create_graph=True)`` computed, in the function that
    calls it or in a helper whose result is bound and backwarded as it is; None when there is none. A backward in a
    scope ``aside`` accepts (another trainer's, when one of several is converted) is not looked at."""
    facts = flow.facts
    grads = {site.node: site for site in facts.calls if site.qualname == "torch.autograd.grad" and any(
        a.keyword is not None and a.keyword.value == "create_graph" and code_of(a.value) != "False"
        for a in site.node.args)}
    penalties = {id(site.scope) for site in grads.values()}
    if not penalties:
        return None
    for site in facts.calls:
        func = site.node.func
        key = dotted(func.value) if isinstance(func, cst.Attribute) else None
        if site.method != "backward" or key is None or aside(site.scope):
            continue
        if id(site.scope) in penalties and _alone(site.scope, key, set(grads)):
            return site
        bound = flow.binding_of(site.scope, key)
        value = bound.value if bound is not None else None
        made = facts.sites.get(value) if isinstance(value, cst.Call) else None
        callee = flow.callee(made) if made is not None else None
        if callee is not None and id(callee) in penalties:
            return site
    return None


def _alone(scope: Scope, key: str, grads: set[cst.Call]) -> bool:
    """Whether ``key``, backwarded in ``scope`` where a penalty's ``autograd.grad`` runs, is the penalty alone: what it
    is computed from leads to that gradient and to nothing else the step computes (only to ``self`` attributes and
    constants, ``self.lambda_ * ((g.norm(2, 1) - 1) ** 2).mean()``). A loss the penalty is summed into
    (``D_loss = D_real_loss + D_fake_loss + gradient_penalty``) also leads to the batch: one backward, which DDP
    reduces."""
    found: set[str] = set()

    def walk(node: cst.CSTNode, seen: frozenset[str]) -> None:
        if node in grads:
            found.add("penalty")
            return
        if isinstance(node, cst.Name):
            bound = [b for b in scope.bindings.get(node.value, []) if b.value is not None]
            if not bound or node.value in seen:
                neutral = node.value == "self" or node.value in scope.imports.aliases  # ``self.lambda_``, ``torch``
                found.add("other" if neutral else "data")
                return
            for binding in bound:
                walk(binding.value, seen | {node.value})  # type: ignore[arg-type]
            return
        if isinstance(node, cst.Attribute):
            walk(node.value, seen)
            return
        if isinstance(node, cst.Call):
            if not isinstance(node.func, cst.Name):
                walk(node.func, seen)  # ``g.norm(2, 1)``: its receiver; a function's name is not data
            for arg in node.args:
                walk(arg.value, seen)
            return
        for child in node.children:
            walk(child, seen)

    walk(cst.parse_expression(key) if "." in key else cst.Name(key), frozenset())
    return "penalty" in found and "data" not in found
