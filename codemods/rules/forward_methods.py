"""RefuseForwardMethods: training through a model method that calls the model's own forward is refused (ACC025).

Research code often computes the loss in a method of the model: ``loss = model.training_step(batch)``,
``model.p_losses(x, t)``, with ``self(x)`` or ``self.forward(x)`` inside. ``accelerator.prepare`` wraps the
model in ``DistributedDataParallel``, and only a call of the wrapper (``model(x)``) sets up the gradient
all-reduce; reached through the wrapper, the method runs on the inner module, its ``self(x)`` skips DDP, and
each process silently trains its own copy (Hugging Face Accelerate's wrapper has no such method at all).
Neither target has a way to send such a method through the wrapper, so the file is refused, pointing at
the call. Methods whose output never reaches a ``backward`` (``vae.inference(z)`` decoded for a figure:
``analysis/output_reach.py``; a method that backpropagates itself always trains), methods used without gradients
(``model.generate(...)`` under ``no_grad``, evaluation), methods that do not run the forward
(``model.decode(z)``), and methods that only pick something from it (a DQN's
``model.act(state, eps)``: its forward under ``no_grad`` or ``volatile``, or every value it returns taken
through ``.item()``, ``.argmax()``, ``.max(1)[1]``, ``.data``, ``.detach()``...: no graph leaves it, so it is no
training forward) are left to the other rules.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.detached import only_picks
from accelify.codemods.analysis.classes import Classes
from accelify.codemods.analysis.facts import CallSite, Facts
from accelify.codemods.analysis.layer_runs import LayerRuns
from accelify.codemods.analysis.output_reach import output_reaches_backward
from accelify.codemods.analysis.roles import MODULE_API, is_module_scope
from accelify.codemods.engine.rule import Example, Rule


class RefuseForwardMethods(Rule):
    name = "forward_methods"
    description = "Refuse training through a model method that runs the model's forward or layers itself (it would bypass DDP)."
    examples = (
        Example(
            before='''\
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        return self.fc(x)
    def training_step(self, x):
        return self(x).pow(2).mean()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model.training_step(x)
    loss.backward()
    optimizer.step()
''',
            warnings=("ACC025:14",),
        ),
        Example(
            # a flow trained through a method that runs the items of its ModuleList (set M3): refused too
            before='''\
import torch
import torch.nn as nn
class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    def log_probability(self, x):
        for layer in reversed(self.layers):
            x = torch.tanh(layer(x))
        return -x.pow(2).sum(1)
model = Flow()
optimizer = torch.optim.Adam(model.parameters())
for x in torch.randn(4, 8, 2):
    loss = -model.log_probability(x).mean()
    loss.backward()
    optimizer.step()
''',
            warnings=("ACC025:14",),
        ),
        Example(
            # a method that does not run the forward, and one that does but under no_grad: converted
            before='''\
import torch
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        return self.fc(x)
    def penalty(self):
        return self.fc.weight.pow(2).sum()
    def predict(self, x):
        return self(x).round()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model(x).sum() + model.penalty()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        print(model.predict(x))
''',
            after='''\
import torch
import torch.nn as nn
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)
    def forward(self, x):
        return self.fc(x)
    def penalty(self):
        return self.fc.weight.pow(2).sum()
    def predict(self, x):
        return self(x).round()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    loss = model(x).sum() + model.penalty()
    accelerator.backward(loss)
    optimizer.step()
    with torch.no_grad():
        accelerator.print(model.predict(x))
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a DQN's acting method: its forward's result only picks an action (``.max(1)[1].data``), no loss is
            # computed from it, so it is no training forward; the loss's forward goes through the prepared model
            before='''\
import random
import torch
import torch.nn as nn
class DQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
    def act(self, state, epsilon):
        if random.random() > epsilon:
            q_value = self.forward(state)
            action = q_value.max(1)[1].data[0]
        else:
            action = random.randrange(2)
        return action
model = DQN()
optimizer = torch.optim.Adam(model.parameters())
for frame in range(100):
    state = torch.rand(1, 4)
    action = model.act(state, 0.1)
    loss = (model(state)[0, action] - 1.0).pow(2)
    loss.backward()
    optimizer.step()
''',
            after='''\
import random
import torch
import torch.nn as nn
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
class DQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
    def act(self, state, epsilon):
        if random.random() > epsilon:
            q_value = self.forward(state)
            action = q_value.max(1)[1].data[0]
        else:
            action = random.randrange(2)
        return action
model = DQN()
optimizer = torch.optim.Adam(model.parameters())
model, optimizer = accelerator.prepare(model, optimizer)
for frame in range(100):
    state = torch.rand(1, 4)
    action = model.act(state, 0.1)
    loss = (model(state)[0, action] - 1.0).pow(2)
    accelerator.backward(loss)
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a VAE sampled through its own method for a figure: the samples never reach a loss or a backward, so
            # the bypassed wrapper averages nothing away; Hugging Face Accelerate's wrapper lacks the method, so the
            # call goes through unwrap_model (the runtime's prepared model forwards it)
            before='''\
import torch
import torch.nn as nn
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.Linear(2, 4)
    def forward(self, z):
        return self.dec(z)
    def inference(self, z):
        return torch.sigmoid(self.dec(z))
model = VAE()
optimizer = torch.optim.Adam(model.parameters())
for i, x in enumerate(torch.rand(8, 3, 4)):
    loss = (model(torch.randn(3, 2)) - x).pow(2).mean()
    loss.backward()
    optimizer.step()
    if i % 4 == 0:
        samples = model.inference(torch.randn(10, 2))
        print(loss.item(), samples.mean().item())
''',
            after='''\
import torch
import torch.nn as nn
from accelerate import Accelerator
accelerator = Accelerator(cpu=True)
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.Linear(2, 4)
    def forward(self, z):
        return self.dec(z)
    def inference(self, z):
        return torch.sigmoid(self.dec(z))
model = VAE()
optimizer = torch.optim.Adam(model.parameters())
model, optimizer = accelerator.prepare(model, optimizer)
for i, x in enumerate(torch.rand(8, 3, 4)):
    loss = (model(torch.randn(3, 2)) - x).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    if i % 4 == 0:
        samples = accelerator.unwrap_model(model).inference(torch.randn(10, 2))
        accelerator.print(loss.item(), samples.mean().item())
accelerator.end_training()
''',
            fires=False,
            target="accelerate",
        ),
        Example(
            # the same method whose samples go into the loss: gradients flow through the bypassed forward: refused
            before='''\
import torch
import torch.nn as nn
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.Linear(2, 4)
    def forward(self, z):
        return self.dec(z)
    def inference(self, z):
        return torch.sigmoid(self.dec(z))
model = VAE()
optimizer = torch.optim.Adam(model.parameters())
for x in torch.rand(8, 3, 4):
    samples = [model.inference(torch.randn(3, 2))]
    loss = (torch.stack(samples) - x).pow(2).mean()
    loss.backward()
    optimizer.step()
''',
            warnings=("ACC025:14",),
        ),
        Example(
            # a parameter replaced while the model runs (VQ-VAE's EMA codebook): refused
            before='''\
import torch
import torch.nn as nn
class Quantizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(8, 4)
        self.ema_w = nn.Parameter(torch.randn(8, 4))
    def forward(self, x):
        if self.training:
            self.ema_w = nn.Parameter(self.ema_w * 0.99 + 0.01 * x.mean())
            self.embedding.weight = nn.Parameter(self.ema_w / 2)
        return x + self.embedding.weight.sum()
model = nn.Sequential(nn.Linear(4, 4), Quantizer())
optimizer = torch.optim.Adam(model.parameters())
for x in torch.rand(10, 2, 4):
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
''',
            warnings=("ACC037:10",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if any(o.role == "model" for o in ctx.plan.objects):
            for method, node, name in _replaced_parameters(ctx.facts):
                ctx.abort(codes.PARAMETER_REPLACED, node, name=name, method=method)
        methods_training = _backward_methods(ctx)
        methods = _forward_methods(ctx.facts, methods_training, ctx.plan.classes)
        if not methods:
            return
        for site in ctx.facts.calls:
            if site.method not in methods or site.no_grad or not isinstance(site.node.func, cst.Attribute):
                continue
            if ctx.plan.prepared_model(site.scope, site.node.func.value, site.stmt) is None:
                continue
            if not (site.method in methods_training or ctx.plan.reaches_backward(site)
                    or output_reaches_backward(ctx.plan, site)):
                continue  # a sample for a figure or a print (``vae.inference(z)``): no gradient leaves it
            ctx.abort(codes.FORWARD_METHOD, site.node, call=f"{code_of(site.node.func)}(...)")


def _replaced_parameters(facts: Facts) -> list[tuple[str, cst.Assign, str]]:
    """``self._ema_w = nn.Parameter(...)`` in a module's ``forward`` (or a method it calls), VQ-VAE's EMA codebook:
    ``(Class.method, the assignment, the attribute)`` for each."""
    out: list[tuple[str, cst.Assign, str]] = []
    for cls in facts.scopes:
        if cls.kind != "class" or not is_module_scope(cls, facts.classes):
            continue
        methods = {s.name: s for s in facts.scopes if s.parent is cls and s.kind == "function"}
        running = {"forward"} | {
            site.node.func.attr.value for site in methods["forward"].calls  # type: ignore[attr-defined]
            if isinstance(site.node.func, cst.Attribute) and m.matches(site.node.func.value, m.Name("self"))
        } if "forward" in methods else set()
        for name in running & set(methods):
            scope = methods[name]
            for assign in m.findall(scope.node, m.Assign()):
                assert isinstance(assign, cst.Assign)
                value = assign.value
                if not (isinstance(value, cst.Call) and scope.imports.qualname(value.func) in _PARAMETER):
                    continue
                for target in assign.targets:
                    key = code_of(target.target)
                    if key.startswith("self."):
                        out.append((f"{cls.name}.{name}", assign, key))
    return out


_PARAMETER = ("torch.nn.Parameter", "torch.nn.parameter.Parameter")


def _forward_methods(facts: Facts, training: set[str], classes: Classes) -> set[str]:
    """Names of methods (other than ``forward`` and nn.Module's own) of classes in the program that call
    ``self(...)``, ``self.forward(...)``, one of the module's layers (``self.actor(x)``, ``layer.inverse(x)`` for
    ``layer in self.layers``: ``analysis/layer_runs.py``) or another such method of ``self``; one that only picks from
    its forward's output counts when it backpropagates itself (``training``)."""
    methods = [
        s for s in facts.scopes
        if s.kind == "function" and s.parent is not None and s.parent.kind == "class"
        and s.name not in MODULE_API and not s.name.startswith("__") and not s.no_grad  # @torch.no_grad(): no gradients
    ]
    layer_runs = LayerRuns(classes)
    runs = {id(method): (layer_runs.layers(method).modules, layer_runs.runs(method)) for method in methods}
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for method in methods:
            layers, ran = runs[id(method)]
            if method.name not in found and any(
                (_runs_forward(site, found) or site.node in ran) and not site.no_grad for site in method.calls
            ):
                if method.name in training or not only_picks(method, found | layers, ran):
                    found.add(method.name)
                    changed = True
    return found


def _runs_forward(site: CallSite, found: set[str]) -> bool:
    func = site.node.func
    if isinstance(func, cst.Name):
        return func.value == "self"
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and (func.attr.value in ("forward", "__call__") or func.attr.value in found)
    )


def _backward_methods(ctx: Context) -> set[str]:
    """Methods of classes of the program that call ``backward`` themselves (``model.train_step(x)`` computing and
    backpropagating its own loss, returning ``loss.item()``): a call of one trains, whatever it returns."""
    return {
        s.name for s in ctx.facts.scopes
        if s.kind == "function" and s.parent is not None and s.parent.kind == "class"
        and any(ctx.plan.reaches_backward(c) for c in s.calls)
    }
