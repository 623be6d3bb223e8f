"""A value read where training runs, as the scope that creates the accelerator sees it.

The accelerator's arguments come from code that may live elsewhere: an AMP flag read in a trainer's method
(``GradScaler(enabled=self.args.fp16_precision)`` in ``SimCLR.train``) while the accelerator is created in the
entry script's ``main()``. Written there verbatim, ``self`` does not exist (a NameError at the first line). This
module translates such an expression through the calls that hand the value over:

- a parameter of the function that reads it becomes what every call in the home passes for it
  (``train_model(..., amp=args.amp)``: ``amp`` -> ``args.amp``);
- ``self.<attr>`` in a method becomes what the class's ``__init__`` stored there, followed to the argument
  every construction of the class in the home passes (``self.args = args`` or ``self.args = kwargs["args"]``
  or ``kwargs.get("args")``,
  ``SimCLR(..., args=args)``: ``self.args`` -> ``args``).

``unseen(home, expr)`` names what of an expression still does not exist in the home, so the caller refuses
rather than write it.
"""

from __future__ import annotations

import builtins

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.snippets import code_of


def seen_from(plan: Plan, home: Scope, where: Scope, expr: cst.BaseExpression, depth: int = 0) -> cst.BaseExpression:
    """``expr``, read in ``where``, as ``home`` sees it (unchanged where it cannot be followed: ``unseen`` then
    says what is missing)."""
    function = where
    while function is not None and function.kind != "function":
        function = function.parent
    if function is None or function is home:
        return expr
    if function.class_scope is not None and home.class_scope is function.class_scope:
        return expr  # another method of the same object: ``self`` is there too
    passed: dict[str, cst.BaseExpression] = {}
    for name in sorted({n.value for n in m.findall(expr, m.Name()) if isinstance(n, cst.Name)} & set(function.param_names)):
        if name == "self" and function.class_scope is not None:
            continue
        found = _passed_in(plan, home, function, name)
        if found is not None:
            passed[name] = found
    if function.class_scope is not None:
        for attribute in m.findall(expr, m.Attribute(value=m.Name("self"))):
            key = dotted(attribute)  # type: ignore[arg-type]
            if key is not None and key not in passed:
                found = _stored(plan, home, function.class_scope, key, depth) if depth < 3 else None
                if found is not None:
                    passed[key] = found
    return cst.ensure_type(expr.visit(Passed(passed)), cst.BaseExpression) if passed else expr


def unseen(home: Scope, expr: cst.BaseExpression) -> list[str]:
    """The names ``expr`` reads that do not exist in ``home`` (``self`` outside a method, another function's local)."""
    attributes = {id(a.attr) for a in m.findall(expr, m.Attribute()) if isinstance(a, cst.Attribute)}
    keywords = {id(a.keyword) for a in m.findall(expr, m.Arg()) if isinstance(a, cst.Arg) and a.keyword is not None}
    missing: list[str] = []
    for node in m.findall(expr, m.Name()):
        assert isinstance(node, cst.Name)
        if id(node) in attributes or id(node) in keywords or node.value in missing:
            continue
        if node.value == "self":
            if home.class_scope is None:
                missing.append("self")
            continue
        if home.resolve(node.value) is None and not hasattr(builtins, node.value):
            missing.append(node.value)
    return missing


def _passed_in(plan: Plan, home: Scope, function: Scope, param: str) -> cst.BaseExpression | None:
    """What every call of ``function`` made in ``home`` passes for ``param`` (the same expression), or None."""
    calls = [c for c in plan.call_sites(function) if c.scope is home]
    args = [plan.arg_for(c, function, param) for c in calls]
    if not calls or any(a is None for a in args) or len({code_of(a.value) for a in args}) != 1:  # type: ignore[union-attr]
        return None
    return args[0].value  # type: ignore[union-attr]


def _stored(plan: Plan, home: Scope, cls: Scope, key: str, depth: int) -> cst.BaseExpression | None:
    """``self.args`` -> what the constructions of ``cls`` in ``home`` pass for the ``__init__`` parameter stored
    there once (``self.args = args``, ``self.args = kwargs["args"]``); ``self.amp`` stored as ``args.amp`` (an
    expression of the parameters) -> the same expression of what is passed."""
    init = plan.facts.function("__init__", cls)
    bindings = cls.bindings.get(key, [])
    if init is None or len(bindings) != 1 or bindings[0].where is not init or bindings[0].value is None:
        return None
    value = bindings[0].value
    param: str | None = None
    if isinstance(value, cst.Name) and value.value in init.param_names:
        param = value.value
    read = plan.kwargs_read(init, value)
    if read is not None and read[0] is init:
        param = read[1]  # ``kwargs["args"]`` (``.get``, ``.pop``): the keyword ``args=`` of the call
    if param is not None:
        return _passed_in(plan, home, init, param)
    if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)) or (
            isinstance(value, cst.Name) and value.value in ("True", "False", "None")):
        return value  # ``self.amp = False``: the same everywhere
    seen = seen_from(plan, home, init, value, depth + 1)
    return seen if seen is not value and not unseen(home, seen) else None


class Passed(cst.CSTTransformer):
    """Each name (a parameter) or ``self.x`` replaced by the expression its callers pass for it."""

    def __init__(self, passed: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.passed = passed

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.passed.get(original.value, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        key = dotted(original)
        if key is not None and key in self.passed:
            return self.passed[key]
        return updated.with_changes(attr=original.attr)  # ``x.amp``: an attribute, not the parameter

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)  # ``f(amp=...)``: a keyword, not the parameter
