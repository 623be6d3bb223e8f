"""Values a program draws at random before it trains, for the shared-draws rule (``rules/shared_draws.py``): the
program's statements walked in the order they run, from the top of the script to the first that trains (into the
functions it calls, a data set's ``__init__``, the folds a training loop's header draws), with which library's global
generator each draw uses (not one given its own ``generator=``/``random_state=``), which seeds are set before them,
the first statement that uses the random state and the last that draws a value the processes must share; and whether
the training loop itself draws as it goes.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import is_module_scope
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.tree_walk import descendants

# what the shared-draws rule says it changed (``Context.changes``): the gated-backward rule reads it
SHARED_DRAWS = "seed the values drawn before training alike on every process, then each process its own stream"

_DRAWS = {
    "torch": ("torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.multinomial", "torch.normal",
              "torch.bernoulli", "torch.poisson", "torch.nn.init.", "torch.utils.data.random_split"),
    "numpy": ("numpy.random.", "sklearn.model_selection.train_test_split"),
    "random": ("random.",),
}
# scikit-learn's splitters draw their folds from NumPy's global generator at ``.split`` when given no
# ``random_state``: the shuffle-split kinds always, the k-fold kinds where they shuffle
_SPLITTERS = tuple(f"sklearn.model_selection.{name}" for name in (
    "ShuffleSplit", "StratifiedShuffleSplit", "GroupShuffleSplit", "RepeatedKFold", "RepeatedStratifiedKFold"))
_SHUFFLING_SPLITTERS = tuple(f"sklearn.model_selection.{name}" for name in ("KFold", "StratifiedKFold", "GroupKFold",
                                                                             "StratifiedGroupKFold"))
_NOT_DRAWS = ("numpy.random.seed", "numpy.random.default_rng", "numpy.random.RandomState", "numpy.random.Generator",
              "random.seed", "random.Random", "random.getstate", "random.setstate", "numpy.random.get_state",
              "numpy.random.set_state")
_SEEDERS = {
    "torch.manual_seed": {"torch"}, "torch.random.manual_seed": {"torch"}, "numpy.random.seed": {"numpy"},
    "random.seed": {"random"},
}
_SEED_ALL = ("set_seed", "seed_everything")  # accelerate.utils.set_seed, transformers.set_seed, L.seed_everything
_WRAPS = ("torch.nn.DataParallel", "torch.nn.parallel.")


class DrawWalk:
    """The program's statements in the order they run, from the top of the script to the first that trains:
    the first draw from an unseeded generator, and the first statement that uses the random state."""

    def __init__(self, facts: Facts, plan: Plan) -> None:
        self.facts = facts
        self.plan = plan
        self.seeded: set[str] = set()
        self.unseeded: set[str] = set()
        self.draw: CallSite | None = None
        self.first: tuple[cst.BaseStatement, Scope] | None = None
        self.last: tuple[cst.BaseStatement, Scope] | None = None  # the last statement that draws a shared value
        self.trains: list[tuple[cst.BaseStatement, Scope]] = []  # the statement that trains, of each block walked
        self.last_block = 0  # the index in ``trains`` of the block ``last`` is in
        self.seen: set[int] = set()
        self.samples = {  # ``TensorDataset(torch.randn(n, d), torch.randn(n, 1))``: samples, each drawn once
            _chain_root(arg.value) for site in facts.calls if site.qualname == "torch.utils.data.TensorDataset"
            for arg in site.node.args
        }
        self.seed_values = {  # ``random.seed(opt.manualSeed)``: a seed drawn at random is not a problem's value
            code_of(site.node.args[0].value) for site in facts.calls
            if site.node.args and _seeder(site.qualname or "")
        }
        # ``self.kf = KFold(n, shuffle=True)``: the names an unseeded splitter is kept in; it draws at ``.split``
        self.splitters = {code_of(t.target) for site in facts.calls
                          if (site.qualname or "").startswith(_SPLITTERS + _SHUFFLING_SPLITTERS) and _library(site)
                          and isinstance(site.stmt, cst.SimpleStatementLine) and isinstance(site.stmt.body[0], cst.Assign)
                          and site.stmt.body[0].value is site.node for t in site.stmt.body[0].targets}
        self.header_draw: cst.For | None = None  # a training loop whose header draws (``for f, (tr, va) in
        # enumerate(kf.split(ds)):``): each process's own stream starts in its body

    def block(self, stmts: list[cst.BaseStatement], scope: Scope) -> bool:
        """Walk ``stmts`` of ``scope``; True once a statement that trains is reached (the walk stops there)."""
        for stmt in stmts:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                continue
            sites = self._sites(stmt, scope)
            if any(self.plan.reaches_backward(s) for s in sites):
                # the program's functions it calls before its training (``Trainer(3).train(ds)``: the trainer's
                # ``__init__``), and the folds a loop's header draws; what it draws itself is the training's data
                # (``train_step(model, torch.randn(2, 16))``, a header's ``torch.rand(8, 4)``); an ``if``'s body is walked
                if isinstance(stmt, cst.SimpleStatementLine):
                    self._note(stmt, scope, [s for s in sites if not self.plan.reaches_backward(s)
                                             and self.plan.callee(s) is not None])
                elif isinstance(stmt, cst.For):
                    header = {id(n) for n in descendants(stmt.iter)}
                    folds = [s for s in sites if id(s.node) in header and self.splits(s)]
                    self._note(stmt, scope, folds)
                    if folds:
                        self.header_draw = stmt
                self.trains.append((stmt, scope))
                self._enter(stmt, scope, sites)
                return True
            self._note(stmt, scope, sites)
        return False

    def _note(self, stmt: cst.BaseStatement, scope: Scope, sites: list[CallSite]) -> None:
        """The draws, seeds and uses of the random state of ``sites``, calls of ``stmt``."""
        draws, seeds, uses = self._random(sites, set())
        if (draws - self.seeded) and self.draw is None:
            self.draw = next(
                s for s in self._flat(sites) if self.library(s) in draws - self.seeded and not self._sample(s)
            )
        if draws - self.seeded:
            self.last, self.last_block = (stmt, scope), len(self.trains)
        self.unseeded |= draws - self.seeded
        if (uses or draws) and self.first is None:
            self.first = (stmt, scope)
        self.seeded |= seeds

    def library(self, site: CallSite) -> str | None:
        """The library whose global generator ``site`` draws from, a kept splitter's ``.split`` included."""
        return _library(site) or ("numpy" if self.splits(site) else None)

    def _enter(self, stmt: cst.BaseStatement, scope: Scope, sites: list[CallSite]) -> None:
        """A statement that trains: its part before the training (the function it calls, an ``if`` body)."""
        if isinstance(stmt, cst.If) and isinstance(stmt.body, cst.IndentedBlock):
            self.block(list(stmt.body.body), scope)
            return
        if isinstance(stmt, cst.SimpleStatementLine):
            for site in sites:
                callee = self.plan.callee(site)
                if callee is not None and id(callee) not in self.seen and self.plan.reaches_backward(site):
                    self.seen.add(id(callee))
                    self.block(callee.body, callee)
                    return

    def _sites(self, stmt: cst.BaseStatement, scope: Scope) -> list[CallSite]:
        first, last = self.facts.order[stmt]
        return [s for s in scope.calls if first <= self.facts.order[s.stmt][0] <= last]

    def _random(self, sites: list[CallSite], seen: set[int]) -> tuple[set[str], set[str], bool]:
        """(libraries drawn from, libraries seeded, whether a module is built) by these calls, through the
        program's functions (a data set class's ``__init__`` included; a torch module's is its weights)."""
        draws: set[str] = set()
        seeds: set[str] = set()
        uses = False
        for site in sites:
            q = site.qualname or ""
            library = self.library(site)
            if library is not None:
                if not self._sample(site) and library not in seeds:  # ``random.seed(seed)`` just before: seeded
                    draws.add(library)
            elif q in _SEEDERS:
                seeds |= _SEEDERS[q]
            elif q.rsplit(".", 1)[-1] in _SEED_ALL:
                seeds |= set(_DRAWS)
            elif q.startswith(("torch.nn.", "torchvision.models.")) and not q.startswith(_WRAPS):
                uses = True
            else:
                callee = self.plan.callee(site) or self.plan.held_method(site)  # (``self.data.load()`` too)
                if callee is None or id(callee) in seen:
                    continue
                if callee.class_scope is not None and is_module_scope(callee.class_scope, self.facts.classes):
                    uses = True  # the model's own weights: broadcast by prepare
                    continue
                seen.add(id(callee))
                more_draws, more_seeds, more_uses = self._random(callee.calls, seen)
                draws |= more_draws - seeds
                seeds |= more_seeds
                uses = uses or more_uses
        return draws, seeds, uses

    def splits(self, site: CallSite) -> bool:
        """``kf.split(ds)`` of an unseeded splitter the program keeps (``self.splitters``): NumPy draws the folds."""
        func = site.node.func
        return site.method == "split" and isinstance(func, cst.Attribute) and code_of(func.value) in self.splitters

    def _sample(self, site: CallSite) -> bool:
        """A draw that defines nothing the processes must share: a seed drawn to be set, samples drawn right
        into a data set, noise drawn per batch of a loader."""
        loop = site.loop
        while loop is not None:
            if self.plan.loader_of(loop) is not None:
                return True
            loop = loop.parent
        return self._draws_a_seed(site) or site.node in self.samples

    def _draws_a_seed(self, site: CallSite) -> bool:
        """``opt.manualSeed = random.randint(1, 10000)``, then ``random.seed(opt.manualSeed)``."""
        stmt = site.stmt
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
            return any(code_of(t.target) in self.seed_values for t in stmt.body[0].targets)
        return False

    def _flat(self, sites: list[CallSite]) -> list[CallSite]:
        out: list[CallSite] = []
        seen: set[int] = set()

        def add(group: list[CallSite]) -> None:
            for site in group:
                out.append(site)
                callee = self.plan.callee(site) or self.plan.held_method(site)
                if callee is not None and id(callee) not in seen:
                    seen.add(id(callee))
                    add(callee.calls)

        add(sites)
        return out


def _chain_root(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``torch.randn(n, d).float()`` -> ``torch.randn(n, d)``."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and isinstance(expr.func.value, cst.Call):
        expr = expr.func.value
    return expr


def _seeder(q: str) -> bool:
    return q in _SEEDERS or q.rsplit(".", 1)[-1] in _SEED_ALL


def _library(site: CallSite) -> str | None:
    """The library whose global generator ``site`` draws from (not with its own ``generator=``/``random_state=``)."""
    q = site.qualname or ""
    keywords = {a.keyword.value: a.value for a in site.node.args if a.keyword is not None}
    if q.startswith(_NOT_DRAWS) or keywords.get("generator") is not None or not _none(keywords.get("random_state")):
        return None
    if q in _SPLITTERS or (q in _SHUFFLING_SPLITTERS and not _false(keywords.get("shuffle"))):
        return "numpy"
    for library, prefixes in _DRAWS.items():
        if q.startswith(prefixes):
            return library
    return None


def _none(value: cst.BaseExpression | None) -> bool:
    """No argument, or ``None`` (``random_state=None``: NumPy's global generator)."""
    return value is None or (isinstance(value, cst.Name) and value.value == "None")


def _false(value: cst.BaseExpression | None) -> bool:
    """No argument, or ``False`` (``KFold(shuffle=False)``: the folds are not drawn)."""
    return value is None or (isinstance(value, cst.Name) and value.value == "False")
