"""WarnUnsupported: patterns later rules will convert (AMP, gradient accumulation) get a warning;
manual distributed code (process groups, DDP, DataParallel, DistributedSampler) stops the conversion.

Before::

    model = nn.parallel.DistributedDataParallel(model)   # the file is left unchanged, with ACC004
    scaler = torch.cuda.amp.GradScaler()                  # converted around, with ACC005
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.context import Context
from accelify.codemods.rule import Rule

WRAPPERS = {"torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.DataParallel"}
SAMPLERS = {"torch.utils.data.DistributedSampler"}
AUTOCAST = {"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast"}
SCALERS = {"torch.cuda.amp.GradScaler", "torch.amp.GradScaler"}
_MODULO = m.BinaryOperation(operator=m.Modulo())


class WarnUnsupported(Rule):
    name = "unsupported"
    description = "Stop on manual distributed code; warn about AMP and hand-written accumulation."

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            q = site.qualname or ""
            short = q.rsplit(".", 1)[-1]
            if q in WRAPPERS:
                ctx.abort(codes.DATA_PARALLEL, site.node, name=short)
            if q in SAMPLERS or (q.startswith("torch.distributed.") and not q.startswith("torch.distributed.run")):
                ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=q)
        for site in ctx.facts.calls:
            q = site.qualname or ""
            if q in AUTOCAST or q in SCALERS:
                ctx.warn(codes.AMP, site.node, name=q.rsplit(".", 1)[-1])
            elif site.method == "step" and isinstance(site.node.func, cst.Attribute):
                if ctx.plan.role(site.scope, site.node.func.value) != "optimizer":
                    continue
                for stmt in ctx.facts.chain(site.stmt):
                    if isinstance(stmt, cst.If) and m.findall(stmt.test, _MODULO):
                        ctx.warn(codes.ACCUMULATION, stmt)
                        break
