"""The prints the accelerator does not reach that still run once it will exist, through the runtime's process state
(``PartialState``): in a plain function called only once the accelerator exists (``PartialState().print``), and in
the scope that makes the accelerator above the statement it is made at, with the functions only that part calls
(``PartialState(<the accelerator's cpu>).print``). The print rule (``rules/print.py``) calls these after its own edits."""

from __future__ import annotations

from typing import Iterator

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.import_time import LITERAL_CPU, before_exit
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.engine.context import Context


def helper_prints(ctx: Context) -> None:
    """The prints of a plain function the accelerator is not threaded into, which runs only after the accelerator
    exists (every call of it is in a scope that has it, after it, or in another such function: S1's
    ``test_single_example(model, test_loader)`` printing a sample's label, a data helper printing ``df.head()``).
    Each process printed its line: they go through ``PartialState().print``, the accelerator's state (once per
    machine, as ``accelerator.print``)."""
    if not ctx.accelerating:
        return
    memo: dict[int, bool] = {}
    done: set[str] = set()
    for site in _open_prints(ctx):
        scope = site.scope
        if ctx.accelerator_in(scope) is not None or not _runs_after_accelerator(ctx, scope, memo, frozenset()):
            continue
        if ctx.replace(site.node.func, site.stmt, lambda _: expression("PartialState().print")):
            if scope.unit not in done:
                done.add(scope.unit)
                ctx.import_state(scope.unit)
            ctx.change("print in a helper called once the accelerator exists -> PartialState().print")


def prints_before_creation(ctx: Context) -> None:
    """The prints of the scope that makes the accelerator, run before it is made (set Q's Q5: a tabular script's data
    preparation and NumPy baseline print at its top level, the accelerator made where its torch model is built,
    further down): through ``PartialState(<the accelerator's cpu>).print``, the state the accelerator is then made on;
    left where that ``cpu`` is an expression (as the top-level prints of a script whose ``main()`` makes it)."""
    home = ctx.plan.home
    if not ctx.accelerating or home is None or ctx.notebook:
        return
    cpu = ctx.plan.analysis(Creation).cpu_argument
    if cpu not in LITERAL_CPU:
        return
    anchor = ctx.plan.analysis(Creation).anchor
    if anchor is None:
        return
    start = ctx.facts.order[anchor[0]][0]  # (prints in code after it that does not reach it, another branch: left)
    state = expression(f"PartialState({cpu}).print")
    sites = [s for s in _open_prints(ctx) if s.scope is home and ctx.facts.order[s.stmt][1] < start
             and not ctx.after_accelerator(s.scope, s.stmt) and not any(c in ctx.facts.skipped for c in ctx.facts.chain(s.stmt))]
    if any([ctx.replace(site.node.func, site.stmt, lambda _, f=state: f) for site in sites]):  # type: ignore[misc]
        ctx.import_state(home.unit)
        ctx.change("print before the accelerator is made -> PartialState().print")
    # the functions and methods only that part of the scope calls (Q5's NumPy model's ``fit`` printing its epochs)
    memo: dict[int, bool] = {}
    for site in _open_prints(ctx):
        scope = site.scope
        if ctx.accelerator_in(scope) is not None or not _runs_before_creation(ctx, scope, home, start, memo, frozenset()):
            continue
        if ctx.replace(site.node.func, site.stmt, lambda _, f=state: f):  # type: ignore[misc]
            ctx.import_state(scope.unit)
            ctx.change("print in a helper called before the accelerator is made -> PartialState().print")


def _open_prints(ctx: Context) -> Iterator[CallSite]:
    """The program's ``print(...)`` calls not yet rewritten, of the builtin (not shadowed), not the last words of a
    process that stops (``sys.exit`` after them)."""
    for site in ctx.facts.calls:
        if site.qualname == "print" and isinstance(site.node.func, cst.Name) and site.scope.resolve("print") is None \
                and not ctx.edits.replaced(site.node.func) and not before_exit(ctx.facts, site.stmt):
            yield site


def _runs_before_creation(ctx: Context, scope: Scope, home: Scope, start: int, memo: dict[int, bool],
                          seen: frozenset[int]) -> bool:
    """Whether the function or method ``scope`` is only called by ``home`` above the statement that makes the
    accelerator (``start``), or by other such functions. Not a dunder method other than ``__init__`` (a data set's
    ``__getitem__`` runs in the loader's worker processes)."""
    if id(scope) in memo:
        return memo[id(scope)]
    name = scope.name or ""
    if scope.kind != "function" or id(scope) in seen or ctx.plan.never_run(scope) \
            or (name.startswith("__") and name != "__init__"):
        return False
    sites = ctx.plan.run_sites(scope)
    result = bool(sites) and all(
        (s.scope is home and ctx.facts.order[s.stmt][1] < start)
        or (s.scope is not home and ctx.accelerator_in(s.scope) is None
            and _runs_before_creation(ctx, s.scope, home, start, memo, seen | {id(scope)}))
        for s in sites)
    memo[id(scope)] = result
    return result


def _runs_after_accelerator(ctx: Context, scope: Scope, memo: dict[int, bool], seen: frozenset[int]) -> bool:
    """Whether the plain function ``scope`` is only called once the accelerator exists (see ``helper_prints``)."""
    if id(scope) in memo:
        return memo[id(scope)]
    if scope.kind != "function" or id(scope) in seen or ctx.plan.never_run(scope):
        return False  # (a method too: set V's V4, a data set's ``__init__`` and a model's method printing)
    sites = ctx.plan.run_sites(scope)
    result = bool(sites) and all(
        (ctx.accelerator_in(s.scope) is not None and ctx.after_accelerator(s.scope, s.stmt))
        or (ctx.accelerator_in(s.scope) is None and _runs_after_accelerator(ctx, s.scope, memo, seen | {id(scope)}))
        for s in sites)
    memo[id(scope)] = result
    return result


def print_parameters(ctx: Context) -> None:
    """A parameter whose default is ``print`` (``trace_func=print`` of the much-copied ``EarlyStopping``,
    ``log=print``) in a function that has the accelerator: where it is kept (``self.trace_func = trace_func``) or
    called, it reads ``accelerator.print`` when it is ``print`` itself (``accelerator.print if trace_func is print else
    trace_func``), so its lines come once; a function handed in stays the caller's."""
    for scope in ctx.facts.scopes:
        node = scope.node
        if scope.kind != "function" or not isinstance(node, cst.FunctionDef) or scope.resolve("print") is not None \
                or ctx.accelerator_in(scope) is None or ctx.plan.never_run(scope):
            continue
        params = [*node.params.params, *node.params.kwonly_params]
        for param in params:
            if not (isinstance(param.default, cst.Name) and param.default.value == "print"):
                continue
            name = param.name.value
            for ref in scope.refs.get(name, []):
                stmt = scope.holders.get(id(ref))
                if stmt is None or not ctx.after_accelerator(scope, stmt) or not _kept_or_called(stmt, ref):
                    continue
                called = not isinstance(stmt.body[0], cst.Assign)  # type: ignore[attr-defined]
                if ctx.replace_through(scope, ref, stmt, lambda n, a, p=name, c=called: _printer(a, p, c)):
                    ctx.change("a print function handed in by default -> accelerator.print")


def _kept_or_called(stmt: cst.BaseStatement, ref: cst.BaseExpression) -> bool:
    """Whether ``ref`` is the whole value of an assignment (``self.trace_func = trace_func``) or the function a call
    calls (``trace_func(msg)``) in ``stmt``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and small.value is ref:
        return True
    return any(call.func is ref for call in m.findall(small, m.Call()))  # type: ignore[attr-defined]


def _printer(accelerator: str, name: str, called: bool) -> cst.BaseExpression:
    """``accelerator.print if name is print else name`` (in parentheses where it is called)."""
    choice = f"{accelerator}.print if {name} is print else {name}"
    return expression(f"({choice})" if called else choice)
