"""UnwrapNames: the parameter names a script reads from its prepared model are the model's own.

On N processes the prepared model is a ``DistributedDataParallel`` wrapper (Hugging Face Accelerate's and the
runtime's alike), whose ``named_parameters()``, ``named_buffers()``, ``named_modules()`` and ``named_children()``
put ``module.`` before every name. A script that matches those names against keys it made from the model before
``prepare`` (a pruning mask built from the dense net, ``mask["0.weight"]``; ``name.startswith("fc")``) then matches
nothing, silently: the mask is never applied, the layer never frozen. So those calls on a prepared model go through
``accelerator.unwrap_model(model)`` (the same parameters under their own names), and a prepared model handed to a
function or method of the program that calls them, or ``state_dict()``, on it (``apply_mask(model, mask)``; an EMA's
``ema.update(model)`` copying ``model.state_dict()[k]`` into the keys of the copy it made before ``prepare``, which
otherwise never moved) is handed unwrapped.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.snippets import unwrap
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_NAMED = ("named_parameters", "named_buffers", "named_modules", "named_children")


class UnwrapNames(Rule):
    name = "named_parameters"
    description = "Read a prepared model's parameter names through accelerator.unwrap_model(model): its own names."
    examples = (
        Example(
            before='''\
import torch


def apply_mask(model, mask):
    for name, param in model.named_parameters():
        if name in mask:
            param.data *= mask[name]


model = torch.nn.Linear(2, 1)
mask = {name: (p.abs() > 0.1).float() for name, p in model.named_parameters() if "weight" in name}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    apply_mask(model, mask)
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
''',
            after='''\
import torch
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


def apply_mask(model, mask):
    for name, param in model.named_parameters():
        if name in mask:
            param.data *= mask[name]


model = torch.nn.Linear(2, 1)
mask = {name: (p.abs() > 0.1).float() for name, p in model.named_parameters() if "weight" in name}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    apply_mask(accelerator.unwrap_model(model), mask)
    frozen = [name for name, p in accelerator.unwrap_model(model).named_parameters() if not p.requires_grad]
accelerator.end_training()
''',
        ),
        Example(
            # the parameters alone (``model.parameters()``) carry no names: left as they are
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    norm = sum(p.grad.norm() for p in model.parameters())
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    norm = sum(p.grad.norm() for p in model.parameters())
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            accelerator = ctx.accelerator_in(site.scope)
            if accelerator is None:
                continue
            receiver = site.node.func.value if isinstance(site.node.func, cst.Attribute) else None
            if site.method in _NAMED and receiver is not None and not (
                    isinstance(receiver, cst.Name) and receiver.value in site.scope.param_names):
                self._unwrap(ctx, site, receiver, accelerator)  # (a parameter's callers hand it unwrapped)
            if site.qualname == "copy.deepcopy" and site.node.args and not site.node.args[0].star:
                # a copy of the prepared model (an EMA's, N8) would copy the wrapper: its keys ``module.*``
                self._unwrap(ctx, site, site.node.args[0].value, accelerator)
            helper = ctx.plan.callee(site)
            if helper is None or ctx.plan.reaches_backward(site):
                continue  # (a function that trains the model it is handed must get the prepared one)
            state = ctx.accelerator_in(helper) is None  # (one with the accelerator unwraps what it saves itself)
            for param in helper.param_names:
                arg = ctx.plan.arg_for(site, helper, param) if _reads_names(helper, param, state) else None
                if arg is not None and not arg.star:
                    self._unwrap(ctx, site, arg.value, accelerator)

    @staticmethod
    def _unwrap(ctx: Context, site: CallSite, model: cst.BaseExpression, accelerator: str) -> None:
        if ctx.edits.replaced(model) or ctx.plan.prepared_model(site.scope, model, site.stmt) is None:
            return
        if ctx.replace(model, site.stmt, lambda n, a=accelerator: unwrap(n, a)):  # type: ignore[misc]
            ctx.change("a prepared model's parameter names -> accelerator.unwrap_model(model).named_parameters()")


def _reads_names(helper: Scope, param: str, state: bool) -> bool:
    """Whether ``helper`` calls ``param.named_parameters()`` (or another of ``_NAMED``) on its parameter, or with
    ``state`` ``param.state_dict()`` (an EMA's ``update(model)`` copying ``msd[k]`` into its own copy's keys), and
    never calls the model itself (a forward there must go through the wrapper)."""
    if any(isinstance(site.node.func, cst.Name) and site.node.func.value == param for site in helper.calls):
        return False
    if any(site.qualname == "copy.deepcopy" and site.node.args and m.matches(site.node.args[0].value, m.Name(param))
           for site in helper.calls):
        return True  # ``self.ema = copy.deepcopy(model)`` in an EMA's constructor: a copy of the module, not its wrapper
    return helper.calls_method_of(param, (*_NAMED, "state_dict") if state else _NAMED)
