"""RemoveDistributedWrapper: ``DistributedDataParallel`` by hand gives way to ``accelerator.prepare``.

- ``model = DDP(model, device_ids=[local_rank])`` goes (alone, or under ``if ddp:``): the model it wraps is
  the one prepared, and ``prepare`` wraps it for this process's device; ``DDP(...)`` used inline becomes the
  module it wraps; its options (``find_unused_parameters=True``, ...) go to
  ``Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(...)])`` (the accelerator rule), and a wrap with
  any other argument (``process_group=``), or options that differ between wraps, is refused (ACC004);
- the unwrapping idioms become ``accelerator.unwrap_model(model)``: ``model.module if ddp else model``,
  ``model.module if hasattr(model, "module") else model``, ``getattr(model, "module", model)``
  (``model.module`` alone is the DataParallel rule's);
- ``with model.no_sync():`` -> ``with accelerator.no_sync(model):`` (one process has no DDP wrapper).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression, unwrap
from accelify.codemods.analysis.distributed import DDP_OPTIONS, DDP_PLACEMENT
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.engine.rule import Example, Rule


class RemoveDistributedWrapper(Rule):
    name = "ddp"
    description = "Drop DistributedDataParallel wraps and unwrap the model through the accelerator."
    examples = (
        Example(
            before='''\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
local_rank = int(os.environ["LOCAL_RANK"])
model = torch.nn.Linear(2, 1)
model = DDP(model, device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
raw_model = model.module if hasattr(model, "module") else model
print(raw_model.weight)
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
local_rank = accelerator.local_process_index
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
raw_model = accelerator.unwrap_model(model)
accelerator.print(raw_model.weight)
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
teacher = torch.nn.Linear(2, 1)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    (model(x) - teacher(x)).sum().backward()
    optimizer.step()
frozen = teacher.module if hasattr(teacher, "module") else teacher
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
teacher = torch.nn.Linear(2, 1)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward((model(x) - teacher(x)).sum())
    optimizer.step()
frozen = teacher.module if hasattr(teacher, "module") else teacher
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = torch.nn.Linear(10, 1).cuda()
model = DDP(model, device_ids=[local_rank], process_group=dist.group.WORLD)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100):
    x = torch.randn(32, 10).cuda()
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
''',
            warnings=("ACC004:10",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.plan.distributed.wrappers:
            self._wrapper(ctx, site)
        for scope in ctx.facts.scopes:
            self._unwrapping(ctx, scope)
        for stmt in ctx.facts.order:
            if isinstance(stmt, cst.With):
                self._no_sync(ctx, stmt)

    def _wrapper(self, ctx: Context, site: CallSite) -> None:
        stmt = site.stmt
        inner = site.node.args[0].value if site.node.args and site.node.args[0].keyword is None else None
        options = ctx.plan.distributed.ddp_options()
        # positionally, DDP(module, device_ids, output_device, ...): the placement prepare does anyway
        unknown = [a for i, a in enumerate(site.node.args[1:], 1) if (a.keyword is None and i > len(DDP_PLACEMENT))
                   or (a.keyword is not None and a.keyword.value not in (*DDP_OPTIONS, *DDP_PLACEMENT))]
        differs = [a for a in site.node.args if a.keyword is not None and a.keyword.value in DDP_OPTIONS
                   and code_of(a) not in {code_of(o) for o in options}]
        if inner is None or unknown or differs:
            ctx.abort(codes.DATA_PARALLEL, site.node, name=code_of(site.node.func))
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and small.value is site.node and len(small.targets) == 1 and (
            code_of(small.targets[0].target) == code_of(inner)
        ):
            ctx.remove(stmt)
        else:
            ctx.replace(site.node, stmt, lambda _, i=inner: i)  # type: ignore[misc]
        ctx.change("DistributedDataParallel -> accelerator.prepare")

    def _unwrapping(self, ctx: Context, scope: Scope) -> None:
        """``model.module if <anything> else model`` and ``getattr(model, "module", model)`` of a prepared model."""
        # only statements that read some ``x.module`` or call ``getattr`` (a compound statement is searched whole)
        stmts = {stmt for attr, stmt in scope.attributes if attr.attr.value == "module"}
        stmts |= {s.stmt for s in scope.calls if isinstance(s.node.func, cst.Name) and s.node.func.value == "getattr"}
        for stmt in stmts:
            for node in m.findall(stmt, m.IfExp(body=m.Attribute(attr=m.Name("module"))) | m.Call(func=m.Name("getattr"))):
                model = _unwrapped_model(node)  # type: ignore[arg-type]
                if model is None or ctx.plan.model_object(scope, model) is None:
                    continue
                ctx.replace_through(scope, node, stmt, lambda _, a, x=model: unwrap(x, a))  # type: ignore[misc]
                ctx.change("model.module -> accelerator.unwrap_model(model)")

    def _no_sync(self, ctx: Context, stmt: cst.With) -> None:
        for item in stmt.items:
            call = item.item
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "no_sync"):
                continue
            site = ctx.facts.sites.get(call)
            if site is None or ctx.plan.model_object(site.scope, call.func.value) is None:
                continue
            model = call.func.value
            ctx.replace_through(site.scope, call, stmt, lambda _, a, x=model: expression(f"{a}.no_sync({code_of(x)})"))  # type: ignore[misc]
            ctx.change("model.no_sync() -> accelerator.no_sync(model)")


def _unwrapped_model(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The model of ``model.module if ... else model`` / ``getattr(model, "module", model)``."""
    if isinstance(node, cst.IfExp) and isinstance(node.body, cst.Attribute):
        model = node.body.value
        return model if dotted(model) is not None and dotted(model) == dotted(node.orelse) else None
    if isinstance(node, cst.Call) and len(node.args) == 3:
        model, attr, default = (a.value for a in node.args)
        if isinstance(attr, cst.SimpleString) and attr.evaluated_value == "module" and dotted(model) and dotted(model) == dotted(default):
            return model
    return None
