"""A loop over a loader its function is handed prepared at one call and as it was at another.

``def evaluate(self, val_loader): for x, y in val_loader: ...`` called from ``train()`` with the loader prepared there,
and from the script after training with the loader as the script made it (set V's V6, a trainer's validation and its
final metrics): at the first call each process walks its own shard, at the second every process walks the whole set.
Neither a gather (which would count the whole set N times at the second call) nor leaving it (one process's share at
the first) is right at both, so the rules that make a loader's values global leave such a loop, the agreement counts
its batches as this process's (its sums differ between processes at the sharded call), and the loop is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Loop
from accelify.codemods.analysis.plan import Plan


@dataclass(frozen=True)
class MixedLoader:
    """The parameter a loop walks, a call that hands it a prepared loader and one that hands it an unprepared one."""

    param: str
    prepared: CallSite
    unprepared: CallSite


def mixed_loader(plan: Plan, loop: Loop) -> MixedLoader | None:
    """The parameter ``loop`` walks when some calls of its function hand it a prepared loader and others a loader
    that is not (followed one call up); else None."""
    source = plan.loop_source(loop)
    scope = loop.scope
    if not isinstance(source, cst.Name) or scope.kind != "function" or source.value not in scope.param_names \
            or source.value in scope.bindings or not isinstance(scope.node, cst.FunctionDef):
        return None
    prepared: CallSite | None = None
    unprepared: CallSite | None = None
    for site in plan.run_sites(scope):
        arg = plan.arg_for(site, scope, source.value)
        if arg is None:
            return None
        found = plan.prepared(site.scope, arg.value, site.stmt)
        if found is not None and found.role == "loader":
            prepared = prepared or site
            continue
        made = plan.origin(site.scope, arg.value)
        if made is None or made.role != "loader":
            return None  # (a parameter of the caller, another value: not followed)
        unprepared = unprepared or site
    if prepared is None or unprepared is None:
        return None
    return MixedLoader(source.value, prepared, unprepared)
