"""ReportLeftovers: after every rule has run, any ``.cuda()`` or ``.to(device)`` no rule could convert
is reported, so a miss is never silent.

Before (the helper has no accelerator, ``dev`` has no known origin)::

    batch = batch.to(dev)

After: unchanged, with ``ACC002 `.to(dev)` with a device of unknown origin was left as is``.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.context import Context, code_of
from accelify.codemods.rule import Rule


class ReportLeftovers(Rule):
    name = "leftovers"
    description = "Warn about device placement no rule converted."

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if site.node in ctx.handled or ctx.is_skipped(site.stmt):
                continue
            if site.method == "cuda" and not site.node.args:
                ctx.warn(codes.UNKNOWN_CUDA, site.node)
            elif site.method == "to" and site.node.args and site.node.args[0].keyword is None:
                value = site.node.args[0].value
                if value in ctx.consumed or not _looks_like_device(value):
                    continue
                found = ctx.plan.origin(site.scope, value)
                if found is not None and found.role == "device" and ctx.accelerators:
                    continue
                ctx.warn(codes.UNKNOWN_TO_DEVICE, site.node, device=code_of(value))


def _looks_like_device(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.Attribute):
        value = value.attr
    return isinstance(value, cst.Name) and ("device" in value.value.lower() or value.value in ("dev", "gpu"))
