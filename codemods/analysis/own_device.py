"""Whether ``x.device`` names a tensor's own device: ``.to(x.device)`` then follows ``x`` wherever it is.

``mask = torch.ones(n).to(x.device)`` in a model's ``forward``, ``noise = torch.randn(s).to(t.device)`` in a helper
that training calls with a batch, ``torch.tensor(1).float().to(var.device)`` after ``var = torch.bernoulli(...)``:
device-agnostic code, right on any device the accelerator picks, so it is no device "of unknown origin". A
*setting* that holds a device (``args.device`` from a command-line option, ``config.device``, ``self.device`` of a
trainer) is: it names one device for every process. So only positive evidence that ``x`` is a tensor counts:

- ``x`` is made by a torch function (``torch.randn``, ``torch.bernoulli``, ...), by a tensor method of such a value,
  by arithmetic or indexing on one, or by a call of a model of the program (its output);
- ``x`` is an element of a data loader's batch (a ``for`` target over a loader);
- ``x`` is a parameter of a method of an ``nn.Module`` subclass other than ``__init__`` (its inputs), whatever the
  method rebinds it to (``x, ld = flow.forward(x)`` over ``self.flows``: a submodule's output);
- ``x`` is a parameter of a function every call of which passes such a value.

``next(model.parameters()).device`` is a parameter's own device too, also through a name bound to it
(``model_device = next(model.parameters()).device``, then ``batch.to(model_device)``).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import module_method

_DEPTH = 4
_NOT_TENSORS = ("torch.device", "torch.cuda.", "torch.nn.", "torch.optim.", "torch.utils.", "torch.distributed.")
_SETTINGS = frozenset({"self", "cls", "args", "opt", "opts", "cfg", "config", "conf", "hparams", "params", "settings"})


def own_device(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` (the argument of ``.to(...)``) is ``x.device`` of a tensor ``x`` (see above), or a tensor
    itself (``.to(p)`` with ``p = next(self.flow.parameters())``: its dtype and device)."""
    if isinstance(expr, cst.Name):
        return _tensor(plan, scope, expr, 0) or _device_of_tensor(plan, scope, expr.value)
    if not (isinstance(expr, cst.Attribute) and expr.attr.value == "device"):
        return False
    return _tensor(plan, scope, expr.value, 0)


def _device_of_tensor(plan: Plan, scope: Scope, name: str) -> bool:
    """``model_device = next(model.parameters()).device`` (or ``x.device`` of any tensor ``x`` above), every binding
    of the name: ``.to(model_device)`` follows the model wherever the accelerator puts it."""
    owner = scope.resolve(name)
    bindings = owner.bindings.get(name, []) if owner is not None and name not in _SETTINGS else []
    return bool(bindings) and all(
        b.unpacked is None and isinstance(b.value, cst.Attribute) and b.value.attr.value == "device"
        and _tensor(plan, owner, b.value.value, 1) for b in bindings)


def _tensor(plan: Plan, scope: Scope, expr: cst.BaseExpression, depth: int, seen: frozenset = frozenset()) -> bool:
    if depth > _DEPTH:
        return False
    if isinstance(expr, cst.Name):
        return _tensor_name(plan, scope, expr.value, depth, seen)
    if isinstance(expr, cst.Call):
        return _tensor_call(plan, scope, expr, depth, seen)
    if isinstance(expr, (cst.BinaryOperation,)):
        return _tensor(plan, scope, expr.left, depth + 1, seen) or _tensor(plan, scope, expr.right, depth + 1, seen)
    if isinstance(expr, cst.UnaryOperation):
        return _tensor(plan, scope, expr.expression, depth + 1, seen)
    if isinstance(expr, cst.Subscript):
        return _tensor(plan, scope, expr.value, depth + 1, seen)
    if isinstance(expr, cst.Attribute) and expr.attr.value in ("data", "T", "mT", "grad", "real", "imag"):
        return _tensor(plan, scope, expr.value, depth + 1, seen)
    return False


def _tensor_call(plan: Plan, scope: Scope, call: cst.Call, depth: int, seen: frozenset) -> bool:
    site = plan.facts.sites.get(call)
    qualname = site.qualname if site is not None else None
    if qualname is not None and qualname.startswith("torch.") and not qualname.startswith(_NOT_TENSORS):
        return True
    func = call.func
    if isinstance(func, cst.Name) and func.value == "next" and call.args:
        inner = call.args[0].value  # ``next(model.parameters())``
        return isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) \
            and inner.func.attr.value in ("parameters", "buffers")
    if plan.role(scope, func) == "model":
        return True  # the output of a model of the program
    if isinstance(func, cst.Attribute):
        return _tensor(plan, scope, func.value, depth + 1, seen)  # ``x.float()``, ``x.view(...)`` of a tensor
    return False


def _tensor_name(plan: Plan, scope: Scope, name: str, depth: int, seen: frozenset = frozenset()) -> bool:
    if name in _SETTINGS:
        return False
    owner = scope.resolve(name)
    if owner is None:
        return False
    if (id(owner), name) in seen:
        return True  # ``x = x.float()``: the name's other bindings decide
    seen = seen | {(id(owner), name)}
    bindings = owner.bindings.get(name, [])
    if owner.kind == "function" and name in owner.param_names and module_method(owner, plan.facts.classes):
        return True  # an input of the model's ``forward`` (or ``sample``, ``inverse``...), however the method rebinds it
    if owner.kind == "function" and name in owner.param_names and not _tensor_param(plan, owner, name, depth):
        return False
    return (bool(bindings) or name in owner.param_names) and all(_tensor_binding(plan, owner, b, depth, seen) for b in bindings)


def _tensor_binding(plan: Plan, owner: Scope, binding: Binding, depth: int, seen: frozenset) -> bool:
    if binding.value is not None and binding.unpacked is None:
        return _tensor(plan, owner, binding.value, depth + 1, seen)
    if binding.unpacked is not None:
        call = binding.unpacked[0]
        return isinstance(call, cst.Call) and plan.role(owner, call.func) == "model"  # ``out, h = model(x)``
    loop = next((lp for lp in owner.loops if lp.node is binding.stmt), None)
    return loop is not None and plan.loader_of(loop) is not None  # an element of a loader's batch


def _tensor_param(plan: Plan, function: Scope, name: str, depth: int) -> bool:
    if function.class_scope is not None:
        return False  # (a model's own method's inputs are taken above, in ``_tensor_name``)
    sites = plan.call_sites(function)
    if not sites:
        return False
    for site in sites:
        passed = plan.arg_for(site, function, name)
        if passed is None or not _tensor(plan, site.scope, passed.value, depth + 1):
            return False
    return True

