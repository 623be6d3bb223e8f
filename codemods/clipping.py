"""SwapClipping: gradient clipping through the accelerator (it unscales and handles sharded models).

Before::

    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    clip_grad_value_(model.parameters(), 0.5)   # from torch.nn.utils import clip_grad_value_

After::

    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    accelerator.clip_grad_value_(model.parameters(), 0.5)
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.context import Context, expression
from accelify.codemods.roles import CLIPPING
from accelify.codemods.rule import Rule


class SwapClipping(Rule):
    name = "clipping"
    description = "Clip gradients with accelerator.clip_grad_norm_/clip_grad_value_."

    def run(self, ctx: Context) -> None:
        if not ctx.accelerators:
            return
        for site in ctx.facts.calls:
            if site.qualname not in CLIPPING:
                continue
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None:
                ctx.warn(codes.NO_ACCELERATOR_HERE, site.node, name=site.qualname.rsplit(".", 1)[-1])
                continue
            method = site.qualname.rsplit(".", 1)[-1]
            func = expression(f"{accelerator}.{method}")
            if ctx.replace(site.node.func, site.stmt, lambda _, f=func: f):  # type: ignore[misc]
                ctx.change(f"torch.nn.utils.{method} -> accelerator.{method}")
