"""Which calls in a module's method run one of the module's own layers.

A method other than ``forward`` that runs the layers itself bypasses the DistributedDataParallel wrapper when it is
called on a prepared model, as ``self(x)`` does. The layers are reached in the shapes authors write: a submodule
called or asked to run one of its methods (``self.actor(s)``, ``self.coupling.inverse(y)``), an item of a
``ModuleList``/``ModuleDict``/``Sequential`` attribute taken by index or key (``self.layers[i](x)``,
``self.blocks[-1].inverse(x)``, ``self.heads["a"](x)``), or walked by a loop or a comprehension, directly or through
``reversed``/``enumerate``/``zip``/``.values()``/``.items()`` (a normalizing flow's
``for layer in reversed(self.layers): x, ld = layer.inverse(x)``). What only reads a layer (``layer.weight.pow(2)``,
``self.fc.parameters()``, ``self.layers.append(m)``) runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.classes import Classes
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.roles import MODULE_API

_CONTAINERS = frozenset({
    "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.Sequential",
    "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.ModuleDict",
    "torch.nn.modules.container.Sequential",
})
_NOT_RUNNING = MODULE_API - {"forward"}  # nn.Module's own methods other than forward only read or set the module
_PASSING = ("reversed", "list", "tuple", "iter")  # ``reversed(self.layers)``: the same items, in some order


@dataclass(frozen=True)
class Layers:
    """The attributes of a module class that hold its layers: ``modules`` are layers themselves (``self.fc``, a
    ``Sequential``), ``containers`` hold layers as items (``ModuleList``, ``ModuleDict``, ``Sequential``)."""

    modules: frozenset[str]
    containers: frozenset[str]


def class_layers(method: Scope, classes: Classes | None = None) -> Layers:
    """The layers of the class that owns ``method`` (``self.<name> = ...`` bindings of that class and, with
    ``classes``, of the program's classes it derives from or that derive from it: ``BaseFlow.log_probability`` walks
    the ``self.layers`` its subclass's ``__init__`` builds)."""
    owner = method.parent
    if owner is None or owner.kind != "class":
        return Layers(frozenset(), frozenset())
    related = [owner]
    if classes is not None:
        pending = [owner]
        while pending:
            for base in classes.bases(pending.pop()):
                if all(base is not c for c in related):
                    related.append(base)
                    pending.append(base)
        related += [s for s in classes.facts.subclasses(owner) if all(s is not c for c in related)]
    modules: set[str] = set()
    containers: set[str] = set()
    for cls in related:
        for key, bindings in cls.bindings.items():
            if not key.startswith("self.") or key.count(".") != 1:
                continue
            name = key.split(".", 1)[1]
            if any(b.role == "model" for b in bindings):
                modules.add(name)
            if any(isinstance(b.value, cst.Call) and cls.imports.qualname(b.value.func) in _CONTAINERS for b in bindings):
                containers.add(name)
    return Layers(frozenset(modules), frozenset(containers))


def layer_runs(method: Scope, layers: Layers) -> set[cst.Call]:
    """The calls of ``method`` that run one of ``layers`` (see the module's docstring)."""
    if not layers.modules and not layers.containers:
        return set()
    names = _Names(layers)
    body = method.node
    changed = True
    while changed:  # aliases and loop targets, until nothing new is learned (``blocks = self.blocks``, then its loop)
        before = (len(names.modules), len(names.containers))
        for assign in m.findall(body, m.Assign()):
            assert isinstance(assign, cst.Assign)
            for target in assign.targets:
                if isinstance(target.target, cst.Name):
                    names.bind(target.target.value, assign.value)
        for loop in m.findall(body, m.For() | m.CompFor()):
            assert isinstance(loop, (cst.For, cst.CompFor))
            names.walk(loop.target, loop.iter)
        changed = (len(names.modules), len(names.containers)) != before
    runs: set[cst.Call] = set()
    for site in method.calls:
        func = site.node.func
        if names.module(func) or (isinstance(func, cst.Attribute) and func.attr.value not in _NOT_RUNNING
                                  and names.module(func.value)):
            runs.add(site.node)
    return runs


class _Names:
    """What the method's expressions hold: a layer, or a container of layers."""

    def __init__(self, layers: Layers) -> None:
        self.layers = layers
        self.modules: set[str] = set()  # local names bound to a layer (``for layer in self.layers``)
        self.containers: set[str] = set()  # local names bound to a container (``layers = self.layers``)

    def module(self, expr: cst.BaseExpression) -> bool:
        """``self.fc``, ``self.layers[i]``, ``layer`` (an item of a container): a layer."""
        if isinstance(expr, cst.Name):
            return expr.value in self.modules
        if isinstance(expr, cst.Subscript):
            return self.container(expr.value) and all(isinstance(e.slice, cst.Index) for e in expr.slice)
        return _self_attribute(expr) in self.layers.modules

    def container(self, expr: cst.BaseExpression) -> bool:
        """``self.layers``, ``self.layers[1:]``, ``layers`` (an alias of it): a container of layers."""
        if isinstance(expr, cst.Name):
            return expr.value in self.containers
        if isinstance(expr, cst.Subscript):
            return self.container(expr.value) and all(isinstance(e.slice, cst.Slice) for e in expr.slice)
        return _self_attribute(expr) in self.layers.containers

    def bind(self, name: str, value: cst.BaseExpression) -> None:
        if self.module(value):
            self.modules.add(name)
        elif self.container(value):
            self.containers.add(name)

    def walk(self, target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
        """Bind the names of ``for target in iterable`` that take a container's items."""
        while isinstance(iterable, cst.Call) and m.matches(iterable.func, m.OneOf(*(m.Name(n) for n in _PASSING))) \
                and len(iterable.args) == 1:
            iterable = iterable.args[0].value
        if self.container(iterable):
            if isinstance(target, cst.Name):
                self.modules.add(target.value)
            return
        if not isinstance(iterable, cst.Call):
            return
        func, args = iterable.func, [a.value for a in iterable.args if a.keyword is None and not a.star]
        parts = _parts(target)
        if isinstance(func, cst.Attribute) and self.container(func.value) and not args:
            if func.attr.value == "values":
                self.walk(target, func.value)
            elif func.attr.value == "items" and parts is not None and len(parts) == 2:
                self.walk(parts[1], func.value)
        elif m.matches(func, m.Name("enumerate")) and args and parts is not None and len(parts) == 2:
            self.walk(parts[1], args[0])
        elif m.matches(func, m.Name("zip")) and parts is not None and len(parts) == len(args):
            for part, arg in zip(parts, args):
                self.walk(part, arg)


def _parts(target: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    """``i, layer`` -> ``[i, layer]``; a target that is no tuple or list -> None."""
    if isinstance(target, (cst.Tuple, cst.List)):
        return [e.value for e in target.elements]
    return None


def _self_attribute(expr: cst.BaseExpression) -> str | None:
    """``self.layers`` -> ``layers``."""
    if isinstance(expr, cst.Attribute) and m.matches(expr.value, m.Name("self")):
        return expr.attr.value
    return None
