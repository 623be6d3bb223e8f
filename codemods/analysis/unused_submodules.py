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
to a module (``deepcopy(...)``, a ``torch.nn`` or library model constructor, a module class of the program; for
``self.net = net``, a parameter of ``__init__``, what the call that makes the model passes), and a ``forward`` (with
the methods it calls through ``self``) that never reads that attribute. The accelerator
then wraps the model with ``find_unused_parameters=True`` (``creation.py``), which changes nothing on one process.
A forward that reaches its attributes by name (``getattr(self, ...)``, ``self.modules()``) is not judged.

A submodule the forward reaches only through some of its parts is judged too: the transfer-learning forward that
runs a backbone's layers one by one and its own head (set M4):

    self.base_model = torchvision.models.resnet34(pretrained=True)
    self.out = nn.Linear(512, 5)
    ...
    x = self.base_model.layer4(self.base_model.conv1(image))   # never self.base_model(x): base_model.fc unused

A submodule called whole (``self.X(x)``, ``self.X.forward(x)``) or handed on whole (``f(self.X)``, ``m = self.X``)
runs all of itself. One reached only by parts is unused in part unless those parts cover every parameter it holds:
known for a module class of the program (its ``__init__``'s submodules and parameters, its methods followed) and for
a ``torch.nn`` layer's ``weight``/``bias``; unknowable for a library model (``resnet34()``, ``timm.create_model()``,
``EfficientNet.from_pretrained()``: ``forward_features``/``extract_features`` skip the classifier), which is then
judged unused in part. ``self.features = nn.Sequential(*list(backbone.children())[:-1])`` called whole holds no
head: not judged. A module class of the program called whole runs what its own ``forward`` reaches: an encoder of
the program that runs its backbone by parts leaves the backbone's head unused in the model that calls the encoder.
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
# constructors of library models (a model whose parts the program cannot see)
_LIBRARY_MODELS = ("torchvision.models.", "timm.create_model", "pretrainedmodels.", "efficientnet_pytorch.EfficientNet.")
# torch.nn layers whose parameters are ``weight`` and ``bias``: a forward that reads both runs all of the layer
_WEIGHT_BIAS = ("Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                "ConvTranspose3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "Embedding")
# an attribute path whose end calls the whole module: ``self.X.forward(x)``
_WHOLE = {"forward", "__call__"}
# a part reached by index (``self.X.blocks[i]``): which parts it covers is unknowable
_INDEXED = "[]"
_DEPTH = 4
Paths = dict[str, set[tuple[str, ...]]]


def unused_submodules(plan: Plan) -> list[tuple[Scope, str]]:
    """``(class, attribute)`` for each prepared model's class holding a submodule its forward never reads, or reads
    only in part (a backbone run layer by layer, its head left out)."""
    found: dict[tuple[int, str], tuple[Scope, str]] = {}
    seen: set[int] = set()
    for binding in plan.objects:
        if binding.role != "model":
            continue
        made = _class_made(plan, binding)
        if made is None or id(made[1]) in seen:
            continue
        seen.add(id(made[1]))
        cls, call, where = made
        found.update({(id(cls), attr): (cls, attr) for attr in _unused(plan, cls, 0, (call, where))})
    return list(found.values())


def _class_made(plan: Plan, binding: Binding, depth: int = 0) -> tuple[Scope, cst.Call, Scope] | None:
    """The class of the program ``binding``'s value instantiates, the call that does and where it is, through helpers
    that return it (``diffusion = get_diffusion_from_args(args).to(device)``, whose ``return diffusion`` is
    ``GaussianDiffusion(...)``)."""
    value = strip_placement(binding.value) if binding.value is not None else None
    if not isinstance(value, cst.Call) or depth > 3:
        return None
    cls = plan.classes.class_of(binding.where, value.func)
    if cls is not None:
        return cls, value, binding.where
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


def _unused(plan: Plan, cls: Scope, depth: int, made: tuple[cst.Call, Scope]) -> list[str]:
    """The module attributes ``cls.__init__`` sets that ``forward`` never reads, or reads only in part; ``made``: the
    call that makes the instance and where it is (an attribute set from a parameter of ``__init__``, ``self.backbone =
    backbone``, holds what that call passes: ``Net(torchvision.models.resnet34())``)."""
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
        if head != "self" or not attr or "." in attr or not bindings:
            continue
        if not all(b.where is init and b.value is not None for b in bindings):
            continue
        values = [_passed(plan, init, b.value, made) for b in bindings if b.value is not None]
        if not all(_a_module(plan, where, value) for value, where in values):
            continue
        if attr not in read or not all(_covered(plan, where, value, read[attr], depth) for value, where in values):
            unused.append(attr)
    return unused


def _passed(plan: Plan, init: Scope, value: cst.BaseExpression,
            made: tuple[cst.Call, Scope]) -> tuple[cst.BaseExpression, Scope]:
    """``value`` as ``init`` sets it, and where it is: for a parameter of ``__init__`` it does not rebind, what the
    call ``made`` passes for it (in the caller); else ``value`` itself, in ``init``."""
    call, where = made
    site = plan.facts.sites.get(call)
    if site is None or not isinstance(value, cst.Name) or value.value not in init.param_names:
        return value, init
    if value.value in init.bindings:
        return value, init  # rebound in __init__ (``backbone = backbone or resnet18()``): not what the call passes
    arg = plan.arg_for(site, init, value.value)
    return (arg.value, where) if arg is not None else (value, init)


def _read(plan: Plan, cls: Scope, method: Scope, seen: set[int]) -> Paths | None:
    """The ``self`` attributes ``method`` reads, with those of the methods it calls through ``self``, each with the
    paths read below it (``self.base_model.layer1(x)``: ``{"base_model": {("layer1",)}}``; ``()``: read whole);
    None when it reaches attributes by name (``getattr(self, name)``, ``self.modules()``)."""
    if id(method) in seen:
        return {}
    seen.add(id(method))
    walk = _SelfPaths()
    method.node.visit(walk)
    read: Paths = {}
    for name, path in walk.paths:
        if name in _REFLECTION:
            return None
        read.setdefault(name, set()).add(path)
        called = plan.classes.self_method(cls, name)
        if called is not None:
            inner = _read(plan, cls, called, seen)
            if inner is None:
                return None
            for key, paths in inner.items():
                read.setdefault(key, set()).update(paths)
    for call in m.findall(method.node, m.Call(func=m.Name("getattr") | m.Name("vars"))):
        assert isinstance(call, cst.Call)
        if call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == "self":
            return None
    return read


class _SelfPaths(cst.CSTVisitor):
    """Each ``self.X...`` chain of a method: ``(X, path below X)``; the path stops at a call of the whole
    (``self.X.forward``: ``()``) and marks a part reached by index (``self.X.blocks[i]``: ``("blocks", "[]")``)."""

    def __init__(self) -> None:
        self.stack: list[cst.CSTNode] = []
        self.paths: list[tuple[str, tuple[str, ...]]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
            self.paths.append((node.attr.value, self._below(node)))
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()

    def _below(self, node: cst.CSTNode) -> tuple[str, ...]:
        path: list[str] = []
        current = node
        for parent in reversed(self.stack):
            if isinstance(parent, cst.Attribute) and parent.value is current:
                if parent.attr.value in _WHOLE:
                    break
                path.append(parent.attr.value)
                current = parent
                continue
            if isinstance(parent, cst.Subscript) and parent.value is current:
                path.append(_INDEXED)
            break
        return tuple(path)


def _covered(plan: Plan, scope: Scope, value: cst.BaseExpression, paths: set[tuple[str, ...]], depth: int) -> bool:
    """Whether reading ``paths`` below the module ``value`` (made in ``scope``) reaches every parameter it holds. Run
    whole, a module class of the program runs what its own ``forward`` reaches (which may leave a part of its own)."""
    if depth > _DEPTH:
        return True
    value = strip_placement(value)
    if not isinstance(value, cst.Call):
        return () in paths
    qualname = scope.imports.qualname(value.func) or ""
    cls = plan.classes.class_of(scope, value.func) if qualname not in _COPIES else None
    if () in paths:
        return cls is None or not _unused(plan, cls, depth + 1, (value, scope))
    if qualname in _CONTAINERS:  # ``self.blocks[i](x)`` or ``for block in self.blocks``: taken as used whole (the
        # runtime names any part left out); ``nn.ModuleDict(dict(wte=..., h=...))``: each key reached
        keys = _literal_keys(value)
        return keys is None or _INDEXED in {p[0] for p in paths} or keys <= {p[0] for p in paths}
    if qualname.startswith("torch.nn."):
        name = qualname.rpartition(".")[2]
        parts = {"weight"} if name == "Embedding" else {"weight", "bias"}
        return name in _WEIGHT_BIAS and parts <= {p[0] for p in paths}
    if cls is None:
        return False  # a library model (or a copy of a model): its parts are unknowable
    return _class_covered(plan, cls, paths, depth)


_CONTAINERS = ("torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict", "torch.nn.ParameterList",
               "torch.nn.ParameterDict")


def _literal_keys(call: cst.Call) -> set[str] | None:
    """The keys of ``nn.ModuleDict(dict(wte=..., h=...))`` / ``nn.ModuleDict({"wte": ...})``; None for any other
    container (a list, or keys this cannot read)."""
    if not call.args or call.args[0].keyword is not None:
        return None
    held = call.args[0].value
    if isinstance(held, cst.Call) and isinstance(held.func, cst.Name) and held.func.value == "dict" \
            and all(a.keyword is not None for a in held.args):
        return {a.keyword.value for a in held.args if a.keyword is not None}
    if isinstance(held, cst.Dict) and all(isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
                                          for e in held.elements):
        return {e.key.evaluated_value for e in held.elements}  # type: ignore[union-attr]
    return None


def _class_covered(plan: Plan, cls: Scope, paths: set[tuple[str, ...]], depth: int) -> bool:
    """Whether ``paths`` below an instance of the program's module class ``cls`` reach all its submodules and
    parameters (its methods read through the instance followed)."""
    init = plan.facts.function("__init__", cls)
    if init is None or plan.classes.bases(cls) or _registers_by_name(init):
        return False  # parts made by a base, or by name (setattr, add_module): unknowable
    paths = set(paths)
    for first in {p[0] for p in paths}:
        method = plan.classes.method(cls, first)
        if method is None:
            continue
        inner = _read(plan, cls, method, set())
        if inner is None:
            return True  # reaches its parts by name: not judged
        paths |= {(key, *path) for key, found in inner.items() for path in found}
    for key, bindings in cls.bindings.items():
        head, _, attr = key.partition(".")
        if head != "self" or not attr or "." in attr:
            continue
        holders = [(b.where, b.value) for b in bindings if b.value is not None and _holds_parameters(plan, b.where, b.value)]
        if not holders:
            continue
        below = {p[1:] for p in paths if p[0] == attr}
        if not below or not all(_covered(plan, where, value, below, depth + 1) for where, value in holders):
            return False
    return True


def _holds_parameters(plan: Plan, scope: Scope, value: cst.BaseExpression) -> bool:
    """A submodule (as ``_a_module`` finds one) or an ``nn.Parameter``."""
    stripped = strip_placement(value)
    if isinstance(stripped, cst.Call) and (scope.imports.qualname(stripped.func) or "").endswith(".Parameter"):
        return True
    return _a_module(plan, scope, value)


def _registers_by_name(init: Scope) -> bool:
    """``setattr(self, ...)``, ``self.add_module(...)``, ``self.register_parameter(...)`` in ``__init__``."""
    registers = m.Name("add_module") | m.Name("register_parameter") | m.Name("register_module")
    by_name = m.Call(func=m.Name("setattr") | m.Attribute(value=m.Name("self"), attr=registers))
    return bool(m.findall(init.node, by_name))


def _a_module(plan: Plan, scope: Scope, value: cst.BaseExpression) -> bool:
    """``deepcopy(model)``, ``nn.Linear(...)``, ``torchvision.models.resnet18()``, ``UNet(...)`` of the program."""
    value = strip_placement(value)
    if not isinstance(value, cst.Call):
        return False
    qualname = scope.imports.qualname(value.func) or ""
    if qualname in _COPIES:
        return True
    if _library_model(scope, value.func):
        return True
    if qualname.startswith("torch.nn.") and not qualname.startswith(("torch.nn.functional.", "torch.nn.init.", "torch.nn.utils.")):
        name = qualname.rpartition(".")[2]
        return name[:1].isupper() and not name.endswith("Loss") and not name.startswith(_NO_PARAMETERS)
    cls = plan.classes.class_of(scope, value.func)
    if cls is None:
        return False
    key = cls.name if cls.unit == "__main__" else f"{cls.unit}.{cls.name}"
    return is_module_class(key, plan.facts.classes)


def _library_model(scope: Scope, func: cst.BaseExpression) -> bool:
    """``resnet34``, ``timm.create_model``, ``pretrainedmodels.__dict__[name]``, ``getattr(torchvision.models, arch)``:
    a callable that makes a library model."""
    if isinstance(func, cst.Subscript):
        func = func.value  # pretrainedmodels.__dict__[name](num_classes=1000, pretrained="imagenet")
    elif isinstance(func, cst.Call) and m.matches(func.func, m.Name("getattr")) and func.args:
        func = func.args[0].value  # getattr(torchvision.models, args.arch)(pretrained=True)
    qualname = scope.imports.qualname(func)
    return qualname is not None and f"{qualname}.".startswith(_LIBRARY_MODELS)
