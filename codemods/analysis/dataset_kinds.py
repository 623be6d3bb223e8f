"""Whether a data set the program builds is map-style (indexed), as far as the program shows.

A map-style data set is walked by a sampler: its batches have the loader's batch size except the last one (without
``drop_last``), and a loader over it can be given a sampler. An iterable one streams its items: its batches end where
the stream ends, on each process for itself. ``TensorDataset``, ``Subset``, a ``torchvision.datasets`` class, or a
class of the program deriving from ``torch.utils.data.Dataset`` and not from ``IterableDataset`` is map-style; a
data set the program does not show (a library's) is not taken for one.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Facts, Scope
from accelify.codemods.analysis.plan import Plan

_MAP_STYLE = ("torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset", "torch.utils.data.Subset",
              "torch.utils.data.dataset.Subset")
_DATASET = ("torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset")
_ITERABLE = ("torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset")


def map_style(facts: Facts, plan: Plan, scope: Scope, dataset: cst.BaseExpression, depth: int = 2) -> bool:
    """Whether ``dataset`` (read in ``scope``) is made by a map-style class (see the module docstring); a parameter
    is map-style when every call passes one."""
    if isinstance(dataset, cst.NamedExpr):  # ``DataLoader(test_set := TensorDataset(...), ...)``
        dataset = dataset.value
    if isinstance(dataset, cst.Name) and scope.kind == "function" and dataset.value in scope.param_names \
            and dataset.value not in scope.bindings:
        sites = plan.call_sites(scope)
        passed = [plan.arg_for(site, scope, dataset.value) for site in sites]
        return depth > 0 and bool(sites) and all(
            arg is not None and map_style(facts, plan, site.scope, arg.value, depth - 1) for site, arg in zip(sites, passed))
    if not isinstance(dataset, cst.Call):
        made = plan.origin(scope, dataset)
        if made is None or not isinstance(made.value, cst.Call):
            return False
        scope, dataset = made.where, made.value
    qualname = scope.imports.qualname(dataset.func) or ""
    if qualname in _MAP_STYLE or qualname.startswith("torchvision.datasets."):
        return True
    bases = _bases(facts, qualname)
    return bool(bases & set(_DATASET)) and not bases & set(_ITERABLE)


def dataset_class(facts: Facts, cls: Scope) -> bool:
    """Whether the class ``cls`` of the program derives, directly or not, from torch's ``Dataset`` or
    ``IterableDataset``: its methods build or serve data, they do not train."""
    qualname = cls.name if cls.unit == "__main__" else f"{cls.unit}.{cls.name}"
    return bool(_bases(facts, qualname) & {*_DATASET, *_ITERABLE})


def _bases(facts: Facts, qualname: str) -> set[str]:
    """Every base of the class ``qualname`` of the program, through the program's own classes."""
    bases: set[str] = set()
    seen: set[str] = set()
    pending = [qualname]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for base in facts.classes.get(name, []):
            bases.add(base)
            pending.append(base)
    return bases
