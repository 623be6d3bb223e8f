"""The records the analysis produces: scopes, bindings, calls, loops, and the ``Facts`` that hold them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from accelify.codemods.analysis.names import ImportMap


_UNIT_SPAN = 10_000_000  # more statements than any module holds


@dataclass(eq=False)
class Scope:
    """A module, function or class body."""

    node: cst.Module | cst.FunctionDef | cst.ClassDef
    kind: str  # "module" | "function" | "class"
    parent: "Scope | None"
    name: str
    params: list[cst.Param] = field(default_factory=list)
    bindings: dict[str, list["Binding"]] = field(default_factory=dict)
    refs: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    holders: dict[int, cst.BaseStatement] = field(default_factory=dict)  # by a ref's id: the statement directly holding it
    calls: list["CallSite"] = field(default_factory=list)
    loops: list["Loop"] = field(default_factory=list)
    no_grad: bool = False
    unit: str = "__main__"  # the module of the program this scope is in
    imports: ImportMap = field(default_factory=ImportMap)  # that module's imports
    returns: list[cst.Return] = field(default_factory=list)
    attributes: list[tuple[cst.Attribute, cst.BaseStatement]] = field(default_factory=list)  # ``x.y`` / ``a.x.y`` and where

    @property
    def body(self) -> list[cst.BaseStatement]:
        """The statements directly in this scope."""
        if isinstance(self.node, cst.Module):
            return list(self.node.body)
        block = self.node.body
        return list(block.body) if isinstance(block, cst.IndentedBlock) else []

    @property
    def param_names(self) -> list[str]:
        return [p.name.value for p in self.params]

    def calls_method_of(self, name: str, methods: tuple[str, ...]) -> bool:
        """Whether this scope calls ``<name>.<method>(...)`` for one of ``methods`` (``model.state_dict()``)."""
        return any(site.method in methods and isinstance(site.node.func, cst.Attribute)
                   and isinstance(site.node.func.value, cst.Name) and site.node.func.value.value == name
                   for site in self.calls)

    @property
    def class_scope(self) -> "Scope | None":
        """For a method (first parameter ``self``), the class that owns it."""
        if self.kind == "function" and self.parent is not None and self.parent.kind == "class":
            if self.params and self.params[0].name.value == "self":
                return self.parent
        return None

    def inside(self, outer: "Scope") -> bool:
        """Whether this scope is nested (at any depth) in ``outer``."""
        parent = self.parent
        while parent is not None:
            if parent is outer:
                return True
            parent = parent.parent
        return False

    def binds(self, name: str) -> bool:
        return name in self.bindings or name in self.param_names

    def resolve(self, name: str) -> "Scope | None":
        """The scope whose binding a load of ``name`` here sees (class bodies are skipped, as in Python)."""
        scope: Scope | None = self
        while scope is not None:
            if (scope is self or scope.kind != "class") and scope.binds(name):
                return scope
            scope = scope.parent
        return None


@dataclass(eq=False)
class Binding:
    """One assignment of a name or ``obj.attr`` key."""

    key: str
    value: cst.BaseExpression | None
    stmt: cst.BaseStatement
    scope: Scope  # where the key lives (the class for ``self.x``)
    where: Scope  # the function or module the statement is in
    target: cst.BaseExpression
    loop: "Loop | None"
    role: str | None = None
    unpacked: tuple[cst.BaseExpression, int] | None = None  # ``a, b = f()``: (the call, this name's index)
    made: "tuple[Scope, cst.BaseExpression] | None" = None  # ``opt = make_opt(m)``: where and by what it was built
    aug: bool = False  # ``total += n``: the new value depends on the old one too
    many: bool = False  # a list of objects of its role (``optimizers = [SGD(b.parameters()) for b in blocks]``)


@dataclass(eq=False)
class CallSite:
    """A call, with what it resolves to and where it is."""

    node: cst.Call
    qualname: str | None
    method: str | None  # ``x.method(...)``: "method"
    stmt: cst.BaseStatement
    scope: Scope
    loop: "Loop | None"
    no_grad: bool


@dataclass(eq=False)
class Loop:
    """A ``for`` loop; ``calls`` holds every call inside it (nested loops included)."""

    node: cst.For
    scope: Scope
    parent: "Loop | None"
    no_grad: bool
    targets: list[str]
    calls: list[CallSite] = field(default_factory=list)
    stmts: list[cst.BaseStatement] = field(default_factory=list)


@dataclass(eq=False)
class Facts:
    """Everything the collector found."""

    module: cst.Module
    imports: ImportMap
    module_scope: Scope
    scopes: list[Scope]
    calls: list[CallSite]
    loops: list[Loop]
    parent_stmt: dict[cst.BaseStatement, cst.BaseStatement | None]
    classes: dict[str, list[str]]  # class qualname -> base qualnames
    skipped: set[cst.BaseStatement]
    dead: set[cst.BaseStatement] = field(default_factory=set)  # statements after a return/raise in their block
    order: dict[cst.BaseStatement, tuple[int, int]] = field(default_factory=dict)  # (first, last) pre-order index
    unit: str = "__main__"
    units: dict[str, "Facts"] = field(default_factory=dict)  # every module of the program, by unit name
    sites: dict[cst.Call, CallSite] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sites = {site.node: site for site in self.calls}
        self._functions = {(id(s.parent), s.name): s for s in self.scopes if s.kind == "function"}
        self._classes = {(id(s.parent), s.name): s for s in self.scopes if s.kind == "class"}
        self._subclasses: dict[int, list[Scope]] = {}
        if not self.units:
            self.units = {self.unit: self}

    @classmethod
    def program(cls, main: "Facts", others: list["Facts"]) -> "Facts":
        """One view over the script (``main``) and the local modules it uses: scopes, calls, loops and
        statements of every module (nodes are distinct objects, so one table serves them all), with
        ``module``, ``imports`` and ``module_scope`` those of the script."""
        every = [main, *others]
        merged = cls(
            module=main.module,
            imports=main.imports,
            module_scope=main.module_scope,
            scopes=[s for f in every for s in f.scopes],
            calls=[c for f in every for c in f.calls],
            loops=[lp for f in every for lp in f.loops],
            parent_stmt={k: v for f in every for k, v in f.parent_stmt.items()},
            classes={k: v for f in reversed(every) for k, v in f.classes.items()},
            skipped={s for f in every for s in f.skipped},
            dead={s for f in every for s in f.dead},
            # positions count per module: each module gets its own range, so that no statement of one module falls
            # in the span of a statement of another (a handler in a helper taken to hold the script's backward)
            order={k: (a + i * _UNIT_SPAN, b + i * _UNIT_SPAN) for i, f in enumerate(every) for k, (a, b) in f.order.items()},
            unit=main.unit,
            units={f.unit: f for f in every},
        )
        return merged

    def class_scope(self, name: str, owner: Scope | None = None) -> Scope | None:
        """A class defined in ``owner`` (default: the module) by name."""
        return self._classes.get((id(owner or self.module_scope), name))

    def subclasses(self, cls: Scope) -> list[Scope]:
        """The classes of the program that derive from ``cls`` (directly or not; a base re-exported by its package,
        ``from base import BaseTrainer``, is recognised) that are not themselves bases of another. Found once per class
        (every method's ``accelerator_in`` asks; ten trainer classes converted one by one asked 35,000 times)."""
        if id(cls) not in self._subclasses:
            self._subclasses[id(cls)] = self._subclasses_of(cls)
        return list(self._subclasses[id(cls)])

    def _subclasses_of(self, cls: Scope) -> list[Scope]:
        def qualname(scope: Scope) -> str:
            return scope.name if scope.unit == "__main__" else f"{scope.unit}.{scope.name}"

        def derives(name: str, target: str, seen: frozenset[str]) -> bool:
            for base in self.classes.get(name, []):
                base = defined_class(base, self.classes)
                if base == target or (base not in seen and derives(base, target, seen | {base})):
                    return True
            return False

        target = qualname(cls)
        found = [s for s in self.scopes if s.kind == "class" and s is not cls and derives(qualname(s), target, frozenset())]
        return [s for s in found if not any(derives(qualname(o), qualname(s), frozenset()) for o in found if o is not s)]

    def unit_of(self, scope: Scope) -> "Facts":
        return self.units[scope.unit]

    def function(self, name: str, owner: Scope | None = None) -> Scope | None:
        """A function defined in ``owner`` (default: the module) by name (the last definition wins)."""
        return self._functions.get((id(owner or self.module_scope), name))

    def bindings(self) -> Iterator[Binding]:
        """Every binding in every scope."""
        for scope in self.scopes:
            for bindings in scope.bindings.values():
                yield from bindings

    def chain(self, stmt: cst.BaseStatement) -> list[cst.BaseStatement]:
        """``stmt`` and the statements that contain it, innermost first."""
        out: list[cst.BaseStatement] = []
        node: cst.BaseStatement | None = stmt
        while node is not None:
            out.append(node)
            node = self.parent_stmt.get(node)
        return out

    def looped(self, site: "CallSite") -> bool:
        """Whether ``site`` runs in a ``for`` or ``while`` loop of its own function."""
        return site.loop is not None or any(isinstance(s, (cst.For, cst.While)) for s in self.chain(site.stmt)[1:])

    def top_stmt(self, stmt: cst.BaseStatement, scope: Scope) -> cst.BaseStatement | None:
        """The statement directly in ``scope``'s body that contains ``stmt``."""
        return self.top_in(stmt, scope.body)

    def top_in(self, stmt: cst.BaseStatement, block: list[cst.BaseStatement]) -> cst.BaseStatement | None:
        """The statement of ``block`` that is ``stmt`` or contains it."""
        for node in self.chain(stmt):
            if node in block:
                return node
        return None

    def last_binding_before(self, scope: Scope, key: str, stmt: cst.BaseStatement) -> Binding | None:
        """The last assignment of ``key`` in ``scope`` itself that comes before ``stmt``, in source order."""
        here = self.order[stmt][0]
        before = [b for b in scope.bindings.get(key, []) if b.where is scope and b.stmt in self.order
                  and self.order[b.stmt][0] < here]
        return max(before, key=lambda b: self.order[b.stmt][0], default=None)

    def after(self, stmt: cst.BaseStatement, anchor: cst.BaseStatement) -> bool:
        """Whether ``stmt`` comes after ``anchor`` and everything inside it, in source order."""
        return self.order[stmt][0] > self.order[anchor][1]


def defined_class(name: str, classes: dict[str, list[str]]) -> str:
    """``base.BaseTrainer`` (re-exported by ``base/__init__.py``) -> ``base.base_trainer.BaseTrainer`` when one class of
    the program has that name in that package."""
    if name in classes:
        return name
    package, _, last = name.rpartition(".")
    found = [k for k in classes if package and k.rsplit(".", 1)[-1] == last and k.startswith(package + ".")]
    return found[0] if len(found) == 1 else name
