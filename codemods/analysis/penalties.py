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

import libcst as cst

from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.flow import Flow
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.snippets import code_of


def penalty_backward(flow: Flow) -> CallSite | None:
    """The ``backward`` call of a value ``torch.autograd.grad(..., create_graph=True)`` computed, in the function that
    calls it or in a helper whose result is bound and backwarded as it is; None when there is none."""
    facts = flow.facts
    penalties = {id(site.scope) for site in facts.calls if site.qualname == "torch.autograd.grad" and any(
        a.keyword is not None and a.keyword.value == "create_graph" and code_of(a.value) != "False"
        for a in site.node.args)}
    if not penalties:
        return None
    for site in facts.calls:
        func = site.node.func
        key = dotted(func.value) if isinstance(func, cst.Attribute) else None
        if site.method != "backward" or key is None:
            continue
        if id(site.scope) in penalties:
            return site
        bound = flow.binding_of(site.scope, key)
        value = bound.value if bound is not None else None
        made = facts.sites.get(value) if isinstance(value, cst.Call) else None
        callee = flow.callee(made) if made is not None else None
        if callee is not None and id(callee) in penalties:
            return site
    return None
