"""The seeds a script sets before its accelerator exists (``torch.manual_seed(1337)`` at module level, the
accelerator made in ``if __name__ == "__main__":`` or in ``main()``), for the seeds rule: where the training draws its
data as it goes (nanoGPT's ``get_batch`` drawing offsets with ``torch.randint``), every process would draw the same
batches from that one seed, and the seed cannot be offset in place (the process index is not known yet there).

A seed runs before the accelerator when its statement comes before the creation in the accelerator's own scope, or
when it is in a scope every call of which does (a module-level statement before ``main()`` is called, a ``set_seed``
helper called before the creation), following calls a few levels up.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.snippets import code_of

_DEPTH = 3


def runs_before(
    site: CallSite,
    has_accelerator: Callable[[Scope], bool],
    after_accelerator: Callable[[Scope, cst.BaseStatement], bool],
    call_sites: Callable[[Scope], list[CallSite]],
    home: Scope | None,
    after: Callable[[cst.BaseStatement, cst.BaseStatement], bool],
) -> bool:
    """Whether ``site`` runs before the accelerator is created, every time it runs (see the module docstring);
    ``after(a, b)``: ``a`` comes after ``b`` in source order."""

    def before(scope: Scope, stmt: cst.BaseStatement, depth: int) -> bool:
        if has_accelerator(scope):
            return not after_accelerator(scope, stmt)
        if scope.kind == "module":
            # the accelerator made in a function: the statement runs before the calls of that function that follow it
            calls = [s for s in call_sites(home)] if home is not None and home.kind == "function" else []
            return bool(calls) and all(s.scope is scope and after(s.stmt, stmt) for s in calls)
        if depth == 0 or scope.kind != "function":
            return False
        sites = call_sites(scope)
        return bool(sites) and all(before(s.scope, s.stmt, depth - 1) for s in sites)

    return before(site.scope, site.stmt, _DEPTH)


def reseed(site: CallSite, seed: cst.BaseExpression, home: Scope, accelerator: str) -> str | None:
    """The call that seeds ``site``'s library again for this process where the accelerator is created in ``home``:
    ``torch.manual_seed(1337 + accelerator.process_index)`` for a number, ``torch.manual_seed(torch.initial_seed() +
    accelerator.process_index)`` for another torch seed (torch keeps it); None where neither can be written there."""
    spelled = code_of(site.node.func)
    root = spelled.split(".", 1)[0]
    if home.resolve(root) is None:
        return None  # the library is not imported under that name where the accelerator is
    if isinstance(seed, cst.Integer):
        return f"{spelled}({seed.value} + {accelerator}.process_index)"
    if site.qualname == "torch.manual_seed":
        return f"{spelled}({root}.initial_seed() + {accelerator}.process_index)"
    return None
