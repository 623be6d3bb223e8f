"""What runs while the program's local modules are imported: the prints of a data module that reports as it loads.

A module the training script imports runs its top level (and the functions of the program that top level calls)
on every process, before the accelerator exists. ``import_time_prints`` finds the ``print(...)`` statements among
that code (``rules/print.py`` keeps them to one process).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from accelify.codemods.analysis.call_graph import CallGraph
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.handle_uses import alone
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.write_calls import TABLE_WRITES

_STREAMS = ("sys.stdout", "sys.stderr")


def import_time_prints(facts: Facts, graph: CallGraph) -> list[CallSite]:
    """The ``print(...)`` statements of the program's local modules that run while they are imported: at a module's
    top level (its ``if __name__ == "__main__":`` block aside: it never runs on import), or in a function of a local
    module its top level calls, however deep; in the order of each module."""
    running: list[Scope] = [facts.units[u].module_scope for u in facts.units if u != "__main__"]
    seen = {id(s) for s in running}
    found: list[CallSite] = []
    while running:
        scope = running.pop()
        for site in scope.calls:
            if site.scope is not scope:
                continue  # a call in a nested function runs when that function is called
            callee = graph.callee(site)
            if callee is not None and callee.unit != "__main__" and id(callee) not in seen:
                seen.add(id(callee))
                running.append(callee)
            if _prints(site):
                found.append(site)
    return sorted(found, key=lambda s: facts.order.get(s.stmt, (0, 0)))


# the accelerator's ``cpu`` arguments a ``PartialState`` can be given anywhere: the same values wherever it is read
LITERAL_CPU = ("", "cpu=True", "cpu=False")
_FIGURES = ("matplotlib.pyplot.savefig", "matplotlib.pyplot.imsave", "matplotlib.image.imsave",
            "torchvision.utils.save_image", "cv2.imwrite")


class EntryLevel:
    """What the training script's own top level runs on every process out of the reach of the accelerator a function
    makes (its ``if __name__ == "__main__":`` block included), found once for the rules that ask
    (``plan.analysis(EntryLevel)``): ``prints``, the ``print(...)`` statements there (``print(VERSION)`` before
    ``main(args)``, the elapsed time after it) and in a function of the script every call of which is at the top
    level, and ``figures``, the files such a function saves (``plt.savefig(f"images/{i}.png")`` in ``plot_weights``, a table's
    ``predictions_df.to_csv(p)``), each a statement of its own; in
    order. Not those before the process stops (``sys.exit``), marked ``# accelify: skip``, or under the script's own
    main-process test. ``cpu`` is the accelerator's ``cpu`` argument for their ``PartialState``; ``literal`` whether
    the top level can read it (else the prints are reported, ACC057)."""

    def __init__(self, plan: Plan) -> None:
        facts = plan.facts
        creation = plan.analysis(Creation)
        self.home = creation.home
        self.cpu = creation.cpu_argument
        self.literal = self.cpu in LITERAL_CPU
        self.prints: list[CallSite] = []
        self.figures: list[CallSite] = []
        entry = facts.units.get("__main__")
        if entry is None or self.home is None or self.home.kind == "module":
            return
        top = entry.module_scope

        def kept(site: CallSite) -> bool:
            return not any(c in facts.skipped for c in facts.chain(site.stmt)) \
                and not plan.distributed.main_only(facts, site.stmt, site.scope)

        self.prints = [s for s in top.calls if s.scope is top and _prints(s) and not before_exit(facts, s.stmt)
                       and kept(s)]
        for site in facts.calls:
            scope = site.scope
            if scope.unit != "__main__" or scope.kind != "function" or scope.class_scope is not None \
                    or scope is self.home:  # (``main(args)`` makes the accelerator: its figures are the writes rule's)
                continue
            figure = (site.qualname in _FIGURES or site.method == "savefig" or _table(site)) and alone(site)
            printed = _prints(site) and not before_exit(facts, site.stmt)  # (set U's U15: ``print("done")`` in
            if (figure or printed) and kept(site):  # ``main()``, after a trainer of another module trained)
                calls = plan.call_sites(scope)
                if calls and all(c.scope is top for c in calls):
                    (self.figures if figure else self.prints).append(site)
        found = {id(s) for s in self.prints}
        self.prints += [s for s in _helper_prints(plan, top, self.home, kept) if id(s) not in found]
        order = facts.order
        self.prints.sort(key=lambda s: order.get(s.stmt, (0, 0)))
        self.figures.sort(key=lambda s: order.get(s.stmt, (0, 0)))

    @property
    def state_used(self) -> bool:
        """Whether the script's top level goes through ``PartialState`` (prints or figures it can make one for)."""
        return self.literal and bool(self.prints or self.figures)


_EXITS = ("sys.exit", "exit", "quit", "os._exit")


def _helper_prints(plan: Plan, top: Scope, home: Scope, kept: Callable[[CallSite], bool]) -> list[CallSite]:
    """The prints of the program's functions and methods (in any of its modules) run only by the script's own top
    level, by its functions that only the top level calls, or by other such functions (set U's U15: the data set's
    ``preprocess_data`` printing its sizes, called by ``main()`` before a trainer of another module makes the
    accelerator). Not in the class that makes the accelerator, nor a dunder method other than ``__init__`` (a data
    set's ``__getitem__`` runs in the loader's workers)."""
    facts = plan.facts
    memo: dict[int, bool] = {}

    def entry_only(scope: Scope, seen: frozenset[int]) -> bool:
        if scope is top:
            return True
        if id(scope) in memo:
            return memo[id(scope)]
        name = scope.name or ""
        if scope.kind != "function" or scope is home or id(scope) in seen or plan.never_run(scope) or plan.bystander(scope) \
                or (name.startswith("__") and name != "__init__") \
                or (scope.class_scope is not None and scope.class_scope is home.class_scope):
            return False
        sites = plan.run_sites(scope)
        result = bool(sites) and all(entry_only(s.scope, seen | {id(scope)}) for s in sites)
        memo[id(scope)] = result
        return result

    return [site for site in facts.calls if site.scope is not top and _prints(site) and not before_exit(facts, site.stmt)
            and kept(site) and entry_only(site.scope, frozenset())]


def _table(site: CallSite) -> bool:
    """``predictions_df.to_csv("output/predictions.csv", index=False)``: a table written to a path."""
    return site.method in TABLE_WRITES and bool(site.node.args)


def before_exit(facts: Facts, stmt: cst.BaseStatement) -> bool:
    """Whether a later statement of ``stmt``'s block ends the process (``sys.exit(1)``, ``raise``)."""
    parent = facts.parent_stmt.get(stmt)
    body = next((b for b in _blocks(parent) if stmt in b), None)  # (the ``else:`` of an ``if`` too: set Q's wgan zoo)
    if not body:
        return False
    for later in body[body.index(stmt) + 1 :]:
        if not isinstance(later, cst.SimpleStatementLine):
            continue
        for small in later.body:
            if isinstance(small, cst.Raise):
                return True
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                site = facts.sites.get(small.value)
                if site is not None and site.qualname in _EXITS:
                    return True
    return False


def _blocks(parent: cst.CSTNode | None) -> list[list[cst.BaseStatement]]:
    """The statement lists directly in ``parent``: its body, an ``else:``'s, an ``except``'s, a ``finally:``'s."""
    suites = [getattr(parent, "body", None), getattr(getattr(parent, "orelse", None), "body", None),
              getattr(getattr(parent, "finalbody", None), "body", None)]
    suites += [h.body for h in getattr(parent, "handlers", ())]
    return [list(s.body) for s in suites if isinstance(s, cst.BaseSuite) and isinstance(getattr(s, "body", None), (list, tuple))]


def _prints(site: CallSite) -> bool:
    """``print(...)`` as a statement, to standard output or error (a file it writes is the writes rules' matter)."""
    node = site.node
    if site.qualname != "print" or not isinstance(node.func, cst.Name) or site.scope.resolve("print") is not None:
        return False
    if not (isinstance(site.stmt, cst.SimpleStatementLine)
            and any(isinstance(s, cst.Expr) and s.value is node for s in site.stmt.body)):
        return False
    target = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "file"), None)
    return target is None or code_of(target) in _STREAMS
