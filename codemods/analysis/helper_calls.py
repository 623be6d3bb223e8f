"""Where to put a helper of the program that makes start-up files on the main process first: at its calls.

A download or an extraction written in a helper the accelerator does not reach (``get_training_set()`` ->
``download_bsd300()`` fetching and extracting an archive; ``get_training_dataloader()`` building
``CIFAR100(root, download=True)``) runs on every process, and nothing can be gated inside it. Where the helper is called
from code that has the accelerator, after it exists, the call's statement can run under ``with
accelerator.main_process_first():`` instead: the main process makes the files, the others then run the helper and
find them. That holds when every call of the helper (followed up through helpers that call it, a few levels) is such a
statement, and nothing in those statements reaches the other processes (the main process would wait there for the
others, which wait for it to leave).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.handle_uses import Collectives
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.snippets import code_of

Ready = Callable[[Scope, cst.BaseStatement], bool]  # whether a statement there can run under main_process_first
_DEPTH = 3


def helper_calls(facts: Facts, plan: Plan, site: CallSite, ready: Ready, collectives: Collectives,
                 depth: int = _DEPTH) -> list[tuple[Scope, cst.BaseStatement]] | None:
    """The statements, in scopes ``ready`` accepts, whose calls run the helper holding ``site``; None when one call
    of it is not such a statement (or reaches the other processes)."""
    helper = site.scope
    while helper.kind == "function" and helper.parent is not None and helper.parent.kind == "function":
        helper = helper.parent  # a function nested in the helper runs when the helper does
    calls = plan.run_sites(helper) if helper.kind == "function" else []
    if not calls:
        return None
    found: list[tuple[Scope, cst.BaseStatement]] = []
    for call in calls:
        holder = holding_statement(facts, call, collectives)
        if holder is not None and ready(call.scope, holder):
            found.append((call.scope, holder))
            continue
        above = helper_calls(facts, plan, call, ready, collectives, depth - 1) if depth > 1 else None
        if above is None:
            return None
        found += [f for f in above if all(f[1] is not g[1] for g in found)]
    return found


def holding_statement(facts: Facts, site: CallSite, collectives: Collectives) -> cst.BaseStatement | None:
    """The one simple statement ``site`` is written in (``loader = DataLoader(MNIST(root, download=True))``), when
    nothing in it reaches the other processes; else None."""
    stmt = site.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], (cst.Expr, cst.Assign, cst.AnnAssign))):
        return None
    inner = [facts.sites.get(c) for c in m.findall(stmt, m.Call())]  # type: ignore[call-overload]
    return None if any(c is not None and collectives.reaches(c) for c in inner) else stmt


class Place(Protocol):
    """What ``first_ready`` and ``already_first`` ask of a conversion (``engine.context.Context``), and
    ``file_writes``: whether a helper's write runs after the accelerator exists, and a tracker's uses."""

    edits: Any
    agreement: Any

    def accelerator_in(self, scope: Scope) -> str | None: ...

    def after_accelerator(self, scope: Scope, stmt: cst.BaseStatement) -> bool: ...

    def will_be_after_accelerator(self, scope: Scope, stmt: cst.BaseStatement) -> bool: ...

    def is_skipped(self, stmt: cst.BaseStatement) -> bool: ...


def first_ready(place: Place, scope: Scope, stmt: cst.BaseStatement, facts: Facts | None = None) -> bool:
    """Whether ``stmt`` in ``scope`` can run under ``main_process_first``: after the accelerator exists there, on a
    path every process takes, and not marked ``# accelify: skip``. The path is judged by the agreement analysis, or,
    given ``facts`` (for a rule that runs before the evaluation rule, which must not build the agreement yet), by
    ``plain_path``."""
    if place.accelerator_in(scope) is None or not place.after_accelerator(scope, stmt) or place.is_skipped(stmt):
        return False
    return plain_path(facts, stmt) if facts is not None else bool(place.agreement.agreed(stmt, scope))


def plain_path(facts: Facts, stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` runs whenever its function (or module) does, but for ``with`` blocks and an
    ``if __name__ == "__main__":`` block: a path every process takes."""
    for outer in facts.chain(stmt)[1:]:
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            return True
        if isinstance(outer, cst.If) and not (outer.orelse is None and "__name__" in code_of(outer.test)) \
                and not _on_options(facts, outer.test):
            return False
        if isinstance(outer, (cst.For, cst.While, cst.Try)):
            return False
    return True


def _on_options(facts: Facts, test: cst.BaseExpression) -> bool:
    """``if args.dataset == "SST":``: a test of the command line's options (every name it reads is bound only to
    ``parser.parse_args()``) and constants, which every process decides alike."""
    attrs = {id(a.attr) for a in m.findall(test, m.Attribute())}  # type: ignore[attr-defined]
    names = {n.value for n in m.findall(test, m.Name()) if id(n) not in attrs} - {"True", "False", "None"}  # type: ignore[attr-defined]
    if not names:
        return False
    for name in names:
        values = [b.value for scope in facts.scopes for b in scope.bindings.get(name, [])]
        if not values or not all(isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
                                 and v.func.attr.value == "parse_args" for v in values):
            return False
    return True


def already_first(place: Place, stmt: cst.BaseStatement) -> bool:
    """Whether an edit already runs ``stmt`` under ``main_process_first`` (another download its helper makes)."""
    new = place.edits.replacement_of(stmt)
    return isinstance(new, cst.With) and "main_process_first" in code_of(new.items[0].item)
