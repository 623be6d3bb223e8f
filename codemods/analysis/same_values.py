"""Whether a name or attribute read in one place holds the value another read holds elsewhere.

``batch_size`` read in ``create_datasets(batch_size)``'s body and ``batch_size`` read at module level after
``train_loader, test_loader = create_datasets(batch_size)``: the parameter is passed that global by every call, and the
global is bound once, so both reads see one value. What counts: the same key (``name``, ``args.bs``, ``self.bs``)
resolving to the same binding, bound at most once (an attribute of it never assigned, or ``self.x`` assigned once in
its class), or a parameter that every call of its function passes such a value for (up to ``depth`` calls deep).
"""

from __future__ import annotations

from accelify.codemods.analysis.call_graph import CallGraph
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.names import dotted


def same_value(plan: CallGraph, scope: Scope, key: str, there: Scope, wanted: str, depth: int = 3) -> bool:
    """Whether ``key`` read in ``scope`` is the value ``wanted`` read in ``there``: the same binding, never
    rebound, or a parameter every caller passes it for."""
    head, _, rest = key.partition(".")
    if head != "self" and scope.kind == "function" and head in scope.param_names and head not in scope.bindings \
            and not (scope is there and key == wanted):
        sites = plan.call_sites(scope)
        if depth == 0 or not sites:
            return False
        for site in sites:
            arg = plan.arg_for(site, scope, head)
            passed = dotted(arg.value) if arg is not None else None
            if passed is None or not same_value(plan, site.scope, passed + (f".{rest}" if rest else ""), there, wanted, depth - 1):
                return False
        return True
    if key != wanted:
        return False
    if head == "self":
        owner, other = scope.class_scope, there.class_scope
        return owner is not None and owner is other and len(owner.bindings.get(key, [])) <= 1
    owner = scope.resolve(head)
    if owner is None or owner is not there.resolve(head):
        return False
    fixed = len(owner.bindings.get(head, [])) + (head in owner.param_names) <= 1
    return fixed and (not rest or not owner.bindings.get(key))
