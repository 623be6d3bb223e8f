"""Prepared models that hold a submodule their forward never runs (an EMA copy, a teacher kept as an attribute).

DistributedDataParallel expects a gradient for every trainable parameter of the module it wraps at every step;
a submodule ``forward`` never reaches gets none, and the second step stops (the runtime's
``UnusedParametersError``). The shape many diffusion and distillation programs write:

    class GaussianDiffusion(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
            self.ema_model = deepcopy(model)     # updated by update_ema(), never in the loss

        def forward(self, x):
            return self.get_losses(x)            # reads self.model only

Found statically: a class of the program that a prepared model instantiates, an attribute its ``__init__`` sets
to a module (``deepcopy(...)``, a ``torch.nn``/``torchvision.models`` constructor, a module class of the program),
and a ``forward`` (with the methods it calls through ``self``) that never reads that attribute. The accelerator
then wraps the model with ``find_unused_parameters=True`` (``creation.py``), which changes nothing on one process.
A forward that reaches its attributes by name (``getattr(self, ...)``, ``self.modules()``) is not judged.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import is_module_class, strip_placement

_COPIES = {"copy.deepcopy"}
# torch.nn classes that hold no parameters (a loss, an activation kept as an attribute): nothing for DDP to miss
_NO_PARAMETERS = ("Parameter", "Identity", "Flatten", "Unflatten", "ReLU", "LeakyReLU", "GELU", "SiLU", "ELU", "Tanh",
                  "Sigmoid", "Softmax", "LogSoftmax", "Dropout", "MaxPool", "AvgPool", "AdaptiveAvgPool",
                  "AdaptiveMaxPool", "Upsample", "PixelShuffle", "Softplus", "Mish", "Hardswish")
_REFLECTION = {"modules", "children", "named_modules", "named_children", "__dict__"}


def unused_submodules(plan: Plan) -> list[tuple[Scope, str]]:
    """``(class, attribute)`` for each prepared model's class holding a submodule its forward never reads."""
    found: list[tuple[Scope, str]] = []
    seen: set[int] = set()
    for binding in plan.objects:
        if binding.role != "model":
            continue
        cls = _class_made(plan, binding)
        if cls is None or id(cls) in seen:
            continue
        seen.add(id(cls))
        found += [(cls, attr) for attr in _unused(plan, cls)]
    return found


def _class_made(plan: Plan, binding: Binding, depth: int = 0) -> Scope | None:
    """The class of the program ``binding``'s value instantiates, through helpers that return it
    (``diffusion = get_diffusion_from_args(args).to(device)``, whose ``return diffusion`` is ``GaussianDiffusion(...)``)."""
    value = strip_placement(binding.value) if binding.value is not None else None
    if not isinstance(value, cst.Call) or depth > 3:
        return None
    cls = plan.classes.class_of(binding.where, value.func)
    if cls is not None:
        return cls
    site = plan.facts.sites.get(value)
    function = plan.callee(site) if site is not None else None
    if function is None or function.name == "__init__":
        return None
    for returned in function.returns:
        key = dotted(returned.value) if returned.value is not None else None
        inner = plan.binding_of(function, key) if key is not None else None
        if inner is not None:
            found = _class_made(plan, inner, depth + 1)
            if found is not None:
                return found
    return None


def _unused(plan: Plan, cls: Scope) -> list[str]:
    """The module attributes ``cls.__init__`` sets that ``forward`` never reads."""
    init = plan.facts.function("__init__", cls)
    forward = plan.classes.method(cls, "forward")
    if init is None or forward is None:
        return []
    read = _read(plan, cls, forward, set())
    if read is None:
        return []
    unused = []
    for key, bindings in cls.bindings.items():
        head, _, attr = key.partition(".")
        if head != "self" or not attr or "." in attr or attr in read:
            continue
        if bindings and all(b.where is init and b.value is not None and _a_module(plan, init, b.value) for b in bindings):
            unused.append(attr)
    return unused


def _read(plan: Plan, cls: Scope, method: Scope, seen: set[int]) -> set[str] | None:
    """The ``self`` attributes ``method`` reads, with those of the methods it calls through ``self``; None when it
    reaches attributes by name (``getattr(self, name)``, ``self.modules()``)."""
    if id(method) in seen:
        return set()
    seen.add(id(method))
    read: set[str] = set()
    for attribute in m.findall(method.node, m.Attribute(value=m.Name("self"))):
        assert isinstance(attribute, cst.Attribute)
        name = attribute.attr.value
        if name in _REFLECTION:
            return None
        read.add(name)
        called = plan.classes.self_method(cls, name)
        if called is not None:
            inner = _read(plan, cls, called, seen)
            if inner is None:
                return None
            read |= inner
    for call in m.findall(method.node, m.Call(func=m.Name("getattr") | m.Name("vars"))):
        assert isinstance(call, cst.Call)
        if call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == "self":
            return None
    return read


def _a_module(plan: Plan, scope: Scope, value: cst.BaseExpression) -> bool:
    """``deepcopy(model)``, ``nn.Linear(...)``, ``torchvision.models.resnet18()``, ``UNet(...)`` of the program."""
    value = strip_placement(value)
    if not isinstance(value, cst.Call):
        return False
    qualname = scope.imports.qualname(value.func) or ""
    if qualname in _COPIES:
        return True
    if qualname.startswith("torchvision.models."):
        return True
    if qualname.startswith("torch.nn.") and not qualname.startswith(("torch.nn.functional.", "torch.nn.init.", "torch.nn.utils.")):
        name = qualname.rpartition(".")[2]
        return name[:1].isupper() and not name.endswith("Loss") and not name.startswith(_NO_PARAMETERS)
    cls = plan.classes.class_of(scope, value.func)
    if cls is None:
        return False
    key = cls.name if cls.unit == "__main__" else f"{cls.unit}.{cls.name}"
    return is_module_class(key, plan.facts.classes)
