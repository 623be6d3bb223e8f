"""Where a scope walks a prepared data loader: each process then sees its own share of the data, so what the scope
builds from it (rows of a results file, a list of predictions) is that share.

Used by the comprehension warning (ACC050) and by the writes rule, which must not keep a helper that writes what it
walked to the main process (the file would hold the main process's share alone).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.prepared_uses import SOURCE_WRAPPERS


def is_prepared_loader(plan: Plan, scope: Scope, iterable: cst.BaseExpression,
                       at: cst.BaseStatement | None = None) -> bool:
    """``val_loader``, ``enumerate(val_loader)`` or ``tqdm(val_loader)`` of a prepared loader, seen from ``scope``."""
    imports = scope.imports
    while isinstance(iterable, cst.Call) and iterable.args and imports.qualname(iterable.func) in SOURCE_WRAPPERS:
        iterable = iterable.args[0].value
    found = plan.prepared(scope, iterable, at)
    return found is not None and found.role == "loader"


def walks_a_share(plan: Plan, scope: Scope) -> bool:
    """Whether ``scope`` (a function) walks a prepared loader in a ``for`` loop or a
    comprehension."""
    if any(plan.loader_of(loop) is not None for loop in scope.loops):
        return True
    for comp in m.findall(scope.node, m.CompFor()):
        assert isinstance(comp, cst.CompFor)
        if is_prepared_loader(plan, scope, comp.iter):
            return True
    return False

