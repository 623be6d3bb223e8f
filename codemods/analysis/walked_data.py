"""What training data the plan could not place is, where it can still be told: a value that is no DataLoader.

The plan reports ``UNKNOWN_DATA`` for a training loop whose data it cannot follow to a loader it prepares: a name
followed nowhere, a parameter whose callers pass something it cannot follow, the result of a function it cannot see
into. ``not_a_loader`` says when that data is nevertheless known not to be a DataLoader, so every process walking all
of it is correct (the processes train on the same data; ``walks_no_loader`` asks it of a problem's data): a value of a data library that makes no loaders (a pandas
frame, a Hugging Face ``datasets`` table, a gym environment), or, for a parameter, what every caller passes (a list
written in the call, ``range(n)``, tensors). ``rules/refusals.py`` refuses the rest (``rules/plan_warnings.py`` reports the same data): it may be a DataLoader that every
process would walk whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from accelify.codemods.analysis.names import ImportMap, dotted
from accelify.codemods.analysis.roles import classify, strip_placement

if TYPE_CHECKING:
    from accelify.codemods.analysis.facts import Facts, Loop, Scope
    from accelify.codemods.analysis.plan import Plan

# data libraries whose values are never a torch DataLoader
NOT_LOADER_LIBRARIES = frozenset({"pandas", "polars", "datasets", "sklearn", "gym", "gymnasium", "scipy", "numpy",
                                  "itertools", "random", "collections", "csv", "json"})
BUILTIN_DATA = frozenset({"range", "list", "zip", "enumerate", "tuple", "sorted", "reversed", "map", "filter", "dict",
                          "set", "iter"})
_DISPLAYS = (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
             cst.SimpleString, cst.Integer)


def not_a_loader(plan: "Plan", loop: "Loop") -> bool:
    """Whether the data ``loop`` walks, which the plan could not follow to a loader, is known to be no DataLoader."""
    source = plan.loop_source(loop)
    origin = plan.origin(loop.scope, source)
    if origin is not None:
        if origin.value is None and origin.unpacked is None:
            return False
        value = origin.unpacked[0] if origin.unpacked is not None else origin.value
        return _plain_data(value, origin.where.imports, plan)  # type: ignore[arg-type]
    passed = _passed(plan, loop.scope, source)
    return bool(passed) and all(_plain_data(v, imports, plan, caller, depth=1) for v, imports, caller in passed)


def walks_no_loader(facts: "Facts", plan: "Plan", data: cst.CSTNode) -> bool:
    """Whether the training data the plan could not place (``UNKNOWN_DATA``, ``data`` the iterable of a loop) is known
    to be no DataLoader (``not_a_loader``): every process walks all of it, which is correct, and ACC022 says so.
    Anything else (a name followed nowhere, the result of a function the analysis cannot see into, such as
    ``get_train_loader(cfg)`` from an installed package) may be a DataLoader that every process would walk whole:
    refused (ACC021)."""
    loop = next((lp for lp in facts.loops if lp.node.iter is data), None)
    return loop is not None and not_a_loader(plan, loop)


def _plain_data(value: cst.BaseExpression, imports: ImportMap, plan: "Plan", scope: "Scope | None" = None,
                depth: int = 0) -> bool:
    """A value that is no DataLoader: a display (``[(x, y)]``), a call of a builtin, torch (not a loader) or a data
    library that makes none (followed from its first call: ``load_dataset(...).with_format("torch")``); with
    ``scope``, a name there followed once to such a value."""
    value = strip_placement(value)
    if isinstance(value, _DISPLAYS):
        return True
    if isinstance(value, cst.Name) and scope is not None and depth > 0:
        found = plan.origin(scope, value)
        if found is None or found.value is None or found.unpacked is not None:
            return False
        return _plain_data(found.value, found.where.imports, plan)
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and isinstance(value.func.value, cst.Call):
        value = value.func.value
    if not isinstance(value, cst.Call):
        return False
    qualname = imports.qualname(value.func) or dotted(value.func) or ""
    if qualname in BUILTIN_DATA:
        return True
    if qualname.split(".")[0] == "torch":
        return classify(value, imports, plan.facts.classes) != "loader"
    return qualname.split(".")[0] in NOT_LOADER_LIBRARIES


def _passed(plan: "Plan", scope: "Scope", source: cst.BaseExpression) -> list[tuple[cst.BaseExpression, ImportMap, "Scope"]]:
    """What every caller passes for the parameter ``source`` reads (``batches``, or ``self.loader`` stored from
    ``__init__``'s ``loader``), with the caller's imports and scope; empty when some call passes nothing known."""
    key = dotted(source)
    if key is None or key.count(".") > 1:
        return []
    binding = plan.binding_of(scope, key)
    value, where = (binding.value, binding.where) if binding is not None else (source, scope)
    name = dotted(value) if value is not None else None
    if name is None or where.kind != "function" or name not in where.param_names or name in where.bindings:
        return []
    out = []
    for site in plan.call_sites(where):
        arg = plan.arg_for(site, where, name)
        if arg is None:
            return []
        out.append((arg.value, site.scope.imports, site.scope))
    return out
