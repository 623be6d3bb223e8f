"""WarnUnsupported: distributed code written by hand that has no counterpart in the accelerator stops the conversion,
and every place of it is reported, so one pass shows all that must be changed by hand.

Most hand-written distribution is converted (the ``ddp``, ``sampler``, ``ranks``, ``collectives``,
``process_group``, ``spawn`` and ``micro_steps`` rules): the set-up goes, rank tests and collectives go
through the accelerator. What is left for a human is what the accelerator does not offer: ``torch.distributed``
calls other than the set-up, ``barrier``, ``all_reduce`` and the rank queries (``all_gather`` into a list,
``broadcast``, ``send``/``recv``, ``new_group``, ...). The file is refused (ACC003 at each of them); the other
rules refuse the shapes they cannot convert in the same way, and ``leftovers`` refuses any piece of the
hand-written set-up no rule took.
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.engine.context import Abort, Context
from accelify.codemods.engine.rule import Example, Rule


class WarnUnsupported(Rule):
    name = "unsupported"
    description = "Stop on hand-written distributed code the accelerator has no counterpart for, reporting every place of it."
    examples = (
        Example(
            before='''\
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    dist.broadcast(model.weight.data, src=0)
    outputs = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(outputs, model(x))
''',
            warnings=('ACC003:9', 'ACC003:11'),
        ),
        Example(
            before='''\
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    dist.all_reduce(loss)
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    loss = accelerator.reduce(loss)
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        refusals = ctx.plan.distributed.refusals
        if refusals:
            raise Abort(*(ctx.warning(codes.MANUAL_DISTRIBUTED, node, name=name, fix=fix) for node, name, fix in refusals))
