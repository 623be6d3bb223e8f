"""ReducePlateauMetric: the value a ``ReduceLROnPlateau`` is stepped with agrees across processes.

``scheduler.step(np.mean(losses))`` (set Q's Q4, a character-level LSTM: the average of the last 50 steps' losses,
each process's own batches) hands each process's plateau scheduler a different value, so each lowers its learning
rate at its own time: the processes then take different steps on the same model, their parameters part (the
runtime's sentinel stops the run; with it off, the models drift apart silently). The value becomes the mean over
the processes where it is handed over: ``accelerator.reduce(torch.tensor(v, dtype=torch.float64,
device=accelerator.device), "mean").item()``, the scheduler then reading the same number everywhere (as the mean of
the processes' averages over as many steps, the average of all of them). A value that already agrees (a gathered
metric, a validation loss the averages rule reduced) is left. Where the accelerator is not at hand, or the module
does not import ``torch`` whole, it is reported (ACC063).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_PLATEAU = ("torch.optim.lr_scheduler.ReduceLROnPlateau",)


class ReducePlateauMetric(Rule):
    name = "plateau_metrics"
    description = "Make the value a ReduceLROnPlateau is stepped with agree across processes."
    examples = (
        Example(
            before='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
dl = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
for epoch in range(3):
    losses = []
    for x, y in dl:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if len(losses) == 4:
            sched.step(np.mean(losses))
            losses = []
''',
            after='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
dl = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
net, opt, dl, sched = accelerator.prepare(net, opt, dl, sched)
for epoch in range(3):
    losses = []
    for x, y in dl:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.item())
        if len(losses) == 4:
            sched.step(accelerator.reduce(torch.tensor(np.mean(losses), dtype=torch.float64, device=accelerator.device), "mean").item())
            losses = []
accelerator.end_training()
''',
        ),
        Example(  # stepped with a value every process computes alike (the epoch): left
            before='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
dl = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
for epoch in range(3):
    losses = []
    for x, y in dl:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if len(losses) == 4:
            sched.step(epoch)
            losses = []
''',
            after='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
dl = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
net, opt, dl, sched = accelerator.prepare(net, opt, dl, sched)
for epoch in range(3):
    losses = []
    for x, y in dl:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.item())
        if len(losses) == 4:
            sched.step(epoch)
            losses = []
accelerator.end_training()
''',
            fires=False,
        ),
        Example(  # a module that imports only parts of torch: no ``torch.tensor`` to write, so it is reported
            before='''\
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset
from data import train_set
dl = DataLoader(train_set, batch_size=8, shuffle=True)
net = nn.Linear(4, 1)
opt = optim.SGD(net.parameters(), lr=0.1)
sched = optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
for epoch in range(3):
    running = 0.0
    for i, (x, y) in enumerate(dl):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        running += loss.item()
        if i % 4 == 3:
            sched.step(running / 4)
            running = 0.0
''',
            after='''\
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset
from data import train_set
from accelify.runtime import Accelerator
accelerator = Accelerator()
dl = DataLoader(train_set, batch_size=8, shuffle=True)
net = nn.Linear(4, 1)
opt = optim.SGD(net.parameters(), lr=0.1)
sched = optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
net, opt, dl, sched = accelerator.prepare(net, opt, dl, sched)
for epoch in range(3):
    running = 0.0
    for i, (x, y) in enumerate(dl):
        opt.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        accelerator.backward(loss)
        opt.step()
        running += loss.item()
        if i % 4 == 3:
            sched.step(running / 4)
            running = 0.0
accelerator.end_training()
''',
            warnings=("ACC063:17",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.facts.calls:
            if site.method != "step" or not site.node.args or not isinstance(site.node.func, cst.Attribute) \
                    or ctx.plan.never_run(site.scope):
                continue
            held = ctx.plan.origin(site.scope, site.node.func.value)
            value = held.unpacked[0] if held is not None and held.unpacked is not None else held.value if held else None
            if not isinstance(value, cst.Call) or (held.where.imports.qualname(value.func) or "") not in _PLATEAU:  # type: ignore[union-attr]
                continue
            arg = site.node.args[0]
            if ctx.agreement.uniform(site.scope, arg.value, site.stmt) or ctx.edits.replaced(arg.value):
                continue
            self._reduce(ctx, site.scope, site.stmt, site.node, arg.value)

    def _reduce(self, ctx: Context, scope, stmt: cst.BaseStatement, call: cst.Call, metric: cst.BaseExpression) -> None:  # type: ignore[no-untyped-def]
        name = code_of(call.func.value)  # type: ignore[attr-defined]
        accelerator = ctx.accelerator_in(scope)
        torch = ctx.facts.unit_of(scope).imports.alias_of("torch")
        why = ("the accelerator is not at hand there" if accelerator is None or not ctx.after_accelerator(scope, stmt)
               else "the module does not import `torch` whole" if torch is None
               else "the statement is skipped" if ctx.is_skipped(stmt) else None)
        if why is not None:
            ctx.warn(codes.PLATEAU_METRIC, stmt, call=code_of(call), name=name, metric=code_of(metric), why=why)
            return
        code = f'{accelerator}.reduce({torch}.tensor({code_of(metric)}, dtype={torch}.float64, device={accelerator}.device), "mean").item()'
        if ctx.replace(metric, stmt, lambda _, c=code: expression(c)):  # type: ignore[misc]
            ctx.change("reduce the value a plateau scheduler is stepped with across processes")
