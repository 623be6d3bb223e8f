"""The classes of a program and their methods, through their bases: what ``obj.method()`` and ``self.method()`` run.

A template project's trainer is ``class Trainer(BaseTrainer)``, with ``BaseTrainer`` in another package (re-exported by
its ``__init__``): ``trainer.train()`` runs the base's ``train``, ``super().__init__(model, ...)`` the base's
``__init__``, and ``self._train_epoch(epoch)`` in the base the subclass's override (the base only declares it).
``Flow`` asks these questions when it resolves a call (``Flow.classes``).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from accelify.codemods.analysis.facts import Facts, Scope, defined_class

# ``Flow.defined``: the local module and name that define a qualified name (through a package's re-exports)
Defined = Callable[[str | None], "tuple[Scope, str] | None"]


class Classes:
    """Class lookups over one program (``Facts.program``)."""

    def __init__(self, facts: Facts, defined: Defined) -> None:
        self.facts = facts
        self.defined = defined

    def bases(self, cls: Scope) -> list[Scope]:
        """The classes of the program ``cls`` derives from directly (a base re-exported by a package included)."""
        name = cls.name if cls.unit == "__main__" else f"{cls.unit}.{cls.name}"
        module = self.facts.units[cls.unit].module_scope if cls.unit in self.facts.units else None
        found = []
        for base in self.facts.classes.get(name, []):
            if "." in base:
                where = self.defined(defined_class(base, self.facts.classes))
                scope = self.facts.class_scope(where[1], where[0]) if where is not None else None
            else:
                scope = self.facts.class_scope(base, module)
            if scope is not None:
                found.append(scope)
        return found

    def method(self, cls: Scope, name: str, seen: frozenset[int] = frozenset()) -> Scope | None:
        """The method ``name`` an instance of ``cls`` runs: its own, else the first base's that defines it."""
        own = self.facts.function(name, cls)
        if own is not None or id(cls) in seen:
            return own
        return next((m for m in (self.method(b, name, seen | {id(cls)}) for b in self.bases(cls)) if m is not None), None)

    def self_method(self, cls: Scope, name: str) -> Scope | None:
        """``self.name()`` in a method of ``cls``: its method, or, where ``cls`` does not define it or only declares it
        (its body raises ``NotImplementedError``: ``BaseTrainer._train_epoch``), the override of its one subclass."""
        found = self.method(cls, name)
        if found is not None and not _abstract(found):
            return found
        overrides = {id(m): m for m in (self.method(sub, name) for sub in self.facts.subclasses(cls))
                     if m is not None and m is not found}
        return next(iter(overrides.values())) if len(overrides) == 1 else found

    def class_of(self, scope: Scope, func: cst.BaseExpression) -> Scope | None:
        """The class of the program that a call of ``func`` in ``scope`` instantiates (None: not one)."""
        cls = None
        if isinstance(func, cst.Name):
            where = scope.resolve(func.value)
            cls = self.facts.class_scope(func.value, where) if where is not None and where.unit == scope.unit else None
        if cls is None:
            found = self.defined(scope.imports.qualname(func))
            cls = self.facts.class_scope(found[1], found[0]) if found is not None else None
        return cls


    def registered(self, scope: Scope, func: cst.BaseExpression) -> list[Scope]:
        """``GANS[args.gan_type]`` in ``GANS[args.gan_type](args)``, where ``GANS = {'GAN': GAN, 'WGAN': WGAN}`` (bound
        once) maps keys to classes of the program: those classes; empty for anything else."""
        if not isinstance(func, cst.Subscript) or not isinstance(func.value, cst.Name):
            return []
        owner = scope.resolve(func.value.value)
        bindings = owner.bindings.get(func.value.value, []) if owner is not None else []
        if len(bindings) != 1 or not isinstance(bindings[0].value, cst.Dict):
            return []
        found = []
        for element in bindings[0].value.elements:
            cls = self.class_of(bindings[0].where, element.value) if isinstance(element, cst.DictElement) else None
            if cls is None:
                return []
            found.append(cls)
        return found


def _abstract(function: Scope) -> bool:
    """Whether a method only declares itself: its body (after a docstring) raises ``NotImplementedError``."""
    body = [stmt for stmt in function.body if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.SimpleString))]
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or not isinstance(body[0].body[0], cst.Raise):
        return False
    raised = body[0].body[0].exc
    raised = raised.func if isinstance(raised, cst.Call) else raised
    return isinstance(raised, cst.Name) and raised.value == "NotImplementedError"
