"""PlaceCudaTypes: the legacy CUDA tensor types (``torch.cuda.FloatTensor(n, k)``) make their tensor on the process's
device.

``torch.cuda.FloatTensor(batch_size, size)`` (set U's U2: a one-hot matrix built in a model's forward, then
``zero_()`` and ``scatter_``) makes a tensor on the current CUDA device, and fails where there is none: the
conversion drops every ``.cuda()`` of the program, but these constructors name CUDA in their type. They become
``torch.empty(batch_size, size, dtype=torch.float32, device=<the process's device>)`` (a list of values:
``torch.tensor(values, dtype=..., device=...)``), the device being ``accelerator.device`` where the accelerator is at
hand, else ``PartialState().device`` (a model's method: the state exists once the accelerator does). What the
tensor holds is the same; only where it lives follows the process.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_TYPES = {"FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16", "BFloat16Tensor": "bfloat16",
          "LongTensor": "int64", "IntTensor": "int32", "ShortTensor": "int16", "CharTensor": "int8",
          "ByteTensor": "uint8", "BoolTensor": "bool"}


class PlaceCudaTypes(Rule):
    name = "cuda_types"
    description = "Make torch.cuda.FloatTensor(...) and its kin on the process's device."
    examples = (
        Example(
            before='''\
import torch
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 8, (32,)), torch.randn(32, 1)), batch_size=8)
model = torch.nn.Linear(8, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for idx, y in loader:
    onehot = torch.cuda.FloatTensor(idx.size(0), 8).zero_()
    onehot.scatter_(1, idx.cuda().view(-1, 1), 1)
    loss = torch.nn.functional.mse_loss(model(onehot), y.cuda())
    opt.zero_grad()
    loss.backward()
    opt.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randint(0, 8, (32,)), torch.randn(32, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
for idx, y in loader:
    onehot = torch.empty(idx.size(0), 8, dtype=torch.float32, device=accelerator.device).zero_()
    onehot.scatter_(1, idx.to(accelerator.device).view(-1, 1), 1)
    loss = torch.nn.functional.mse_loss(model(onehot), y.to(accelerator.device))
    opt.zero_grad()
    accelerator.backward(loss)
    opt.step()
accelerator.end_training()
''',
        ),
        Example(
            # the CPU types (``torch.FloatTensor(n, k)``) stay: the original made them on the CPU too
            before='''\
import torch
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
noise = torch.FloatTensor(8).uniform_()
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x + noise), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
noise = torch.FloatTensor(8).uniform_()
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x + noise), y)
    opt.zero_grad()
    accelerator.backward(loss)
    opt.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.facts.calls:
            name = site.qualname or ""
            kind = name.rsplit(".", 1)[-1]
            if not name.startswith("torch.cuda.") or kind not in _TYPES or ctx.plan.never_run(site.scope):
                continue
            torch = site.scope.imports.alias_of("torch")
            accelerator = ctx.accelerator_in(site.scope)
            at_hand = accelerator is not None and ctx.after_accelerator(site.scope, site.stmt)
            if torch is None or (not at_hand and ctx.notebook):
                continue
            device = f"{accelerator}.device" if at_hand else "PartialState().device"
            args = site.node.args
            if any(a.keyword is not None or a.star for a in args):
                continue  # (``torch.cuda.FloatTensor(*shape)``, a keyword: not rewritten)
            data = len(args) == 1 and isinstance(args[0].value, (cst.List, cst.Tuple, cst.ListComp))
            made = "tensor" if data else "empty"
            code = f"{torch}.{made}({', '.join(code_of(a.value) for a in args)}, dtype={torch}.{_TYPES[kind]}, device={device})" \
                if args else f"{torch}.{made}(0, dtype={torch}.{_TYPES[kind]}, device={device})"
            if ctx.replace(site.node, site.stmt, lambda _, c=code: expression(c)):  # type: ignore[misc]
                if not at_hand:
                    ctx.import_state(site.scope.unit)
                ctx.change("make torch.cuda tensor types on the process's device")
