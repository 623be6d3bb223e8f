"""Which calls in a module's method run one of the module's own layers.

A method other than ``forward`` that runs the layers itself bypasses the DistributedDataParallel wrapper when it is
called on a prepared model, as ``self(x)`` does. The layers are reached in the shapes authors write: a submodule
called or asked to run one of its methods (``self.actor(s)``, ``self.coupling.inverse(y)``), an item of a
``ModuleList``/``ModuleDict``/``Sequential`` attribute taken by index or key (``self.layers[i](x)``,
``self.blocks[-1].inverse(x)``, ``self.heads["a"](x)``), or walked by a loop or a comprehension, directly or through
``reversed``/``enumerate``/``zip``/``.values()``/``.items()``/``.children()`` (a normalizing flow's
``for layer in reversed(self.layers): x, ld = layer.inverse(x)``). What only reads a layer (``layer.weight.pow(2)``,
``self.fc.parameters()``, ``self.layers.append(m)``) runs nothing, nor does a submodule's method of the program that
touches no weight (``self.core.init_hidden(batch_size)`` returning zeros).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.classes import Classes
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.roles import MODULE_API, strip_placement

_CONTAINERS = frozenset({
    "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.Sequential",
    "torch.nn.modules.container.ModuleList", "torch.nn.modules.container.ModuleDict",
    "torch.nn.modules.container.Sequential",
})
_PARAMETERS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.ParameterList",
                         "torch.nn.ParameterDict"})
_NOT_RUNNING = MODULE_API - {"forward"}  # nn.Module's own methods other than forward only read or set the module
_PASSING = ("reversed", "list", "tuple", "iter")  # ``reversed(self.layers)``: the same items, in some order


@dataclass(frozen=True)
class Layers:
    """The attributes of a module class that hold its layers: ``modules`` are layers themselves (``self.fc``, a
    ``Sequential``), ``containers`` hold layers as items (``ModuleList``, ``ModuleDict``, ``Sequential``),
    ``parameters`` its own weights (``self.shift = nn.Parameter(...)``)."""

    modules: frozenset[str]
    containers: frozenset[str]
    parameters: frozenset[str] = frozenset()


class LayerRuns:
    """The layer runs of the program's methods, each found once.

    A submodule's own method (``layer.inverse(x)``) is a run unless the program defines it and it touches no weight
    (a recurrent core's ``init_hidden(batch_size)`` returning ``torch.zeros(...)``): the method of the submodule's
    class where that class is known (``self.core = Core()``), else every method of the program of that name."""

    def __init__(self, classes: Classes) -> None:
        self.classes = classes
        self._layers: dict[int, Layers] = {}
        self._runs: dict[int, set[cst.Call]] = {}
        self._uses: dict[int, bool] = {}

    def layers(self, method: Scope) -> Layers:
        """The layers of the class that owns ``method``: ``self.<name> = ...`` bindings of that class and of the
        program's classes it derives from or that derive from it (``BaseFlow.log_probability`` walks the
        ``self.layers`` its subclass's ``__init__`` builds)."""
        owner = method.parent
        if owner is None or owner.kind != "class":
            return Layers(frozenset(), frozenset())
        if id(owner) not in self._layers:
            self._layers[id(owner)] = _class_layers(self._related(owner))
        return self._layers[id(owner)]

    def runs(self, method: Scope) -> set[cst.Call]:
        """The calls of ``method`` that run one of its class's layers (see the module's docstring)."""
        if id(method) not in self._runs:
            self._runs[id(method)] = set()  # (a method reached again while its runs are found: none yet)
            self._runs[id(method)] = self._find(method)
        return self._runs[id(method)]

    def _related(self, owner: Scope) -> list[Scope]:
        related = [owner]
        pending = [owner]
        while pending:
            for base in self.classes.bases(pending.pop()):
                if all(base is not c for c in related):
                    related.append(base)
                    pending.append(base)
        return related + [s for s in self.classes.facts.subclasses(owner) if all(s is not c for c in related)]

    def _find(self, method: Scope) -> set[cst.Call]:
        layers = self.layers(method)
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
                                      and names.module(func.value) and not self._weightless(method, func)):
                runs.add(site.node)
        return runs

    def _weightless(self, method: Scope, func: cst.Attribute) -> bool:
        """``self.core.init_hidden`` / ``layer.init_hidden``: a method of the program that touches no weight."""
        name = func.attr.value
        targets: list[Scope | None] = []
        key = _self_attribute(func.value)
        owner = method.parent
        if key is not None and owner is not None:
            bindings = [b for cls in self._related(owner) for b in cls.bindings.get(f"self.{key}", [])]
            made = [_called(b.value) for b in bindings]
            found = [self.classes.class_of(b.where, c.func) if c is not None else None for b, c in zip(bindings, made)]
            if bindings and all(c is not None for c in found):
                targets = [self.classes.method(c, name) for c in found if c is not None]
        if not targets:
            targets = [s for s in self.classes.facts.scopes
                       if s.kind == "function" and s.name == name and s.parent is not None and s.parent.kind == "class"]
        return bool(targets) and all(t is not None and not self._uses_weights(t) for t in targets)

    def _uses_weights(self, method: Scope) -> bool:
        """Whether ``method`` runs a layer, reads a weight (``self.shift``, ``self.fc.weight``), runs the module's
        forward or another method of its class that does."""
        if id(method) in self._uses:
            return self._uses[id(method)]
        self._uses[id(method)] = False  # (a method reached again from itself adds nothing)
        layers = self.layers(method)
        used = bool(self.runs(method))
        for attribute in m.findall(method.node, m.Attribute(value=m.Name("self"))):
            assert isinstance(attribute, cst.Attribute)
            used = used or attribute.attr.value in layers.parameters
        for site in method.calls:
            func = site.node.func
            if m.matches(func, m.Name("self")) or m.matches(func, m.Attribute(value=m.Name("self"))):
                attr = func.attr.value if isinstance(func, cst.Attribute) else "forward"
                target = self.classes.method(method.parent, attr) if method.parent is not None else None
                if attr in ("forward", "__call__") or (target is None and attr not in MODULE_API) or \
                        (target is not None and self._uses_weights(target)):
                    used = True
        for attribute in m.findall(method.node, m.Attribute(value=m.Attribute(value=m.Name("self")))):
            assert isinstance(attribute, cst.Attribute) and isinstance(attribute.value, cst.Attribute)
            used = used or attribute.value.attr.value in layers.modules  # ``self.fc.weight``: a layer's weight read
        self._uses[id(method)] = used
        return used


def _class_layers(related: list[Scope]) -> Layers:
    modules: set[str] = set()
    containers: set[str] = set()
    parameters: set[str] = set()
    for cls in related:
        for key, bindings in cls.bindings.items():
            if not key.startswith("self.") or key.count(".") != 1:
                continue
            name = key.split(".", 1)[1]
            if any(b.role == "model" for b in bindings):
                modules.add(name)
            for b in bindings:
                made = _called(b.value)
                qualname = cls.imports.qualname(made.func) if made is not None else None
                if qualname in _CONTAINERS:
                    containers.add(name)
                elif qualname in _PARAMETERS:
                    parameters.add(name)
    return Layers(frozenset(modules), frozenset(containers), frozenset(parameters))


def _called(value: cst.BaseExpression | None) -> cst.Call | None:
    """The call ``value`` is made by (``Core().to(device)``: ``Core()``), if any."""
    value = strip_placement(value) if value is not None else None
    return value if isinstance(value, cst.Call) else None


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
            if func.attr.value in ("values", "children"):
                self.walk(target, func.value)
            elif func.attr.value in ("items", "named_children") and parts is not None and len(parts) == 2:
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
