"""SeedSharedDraws: values drawn at random before training, with no seed, are drawn alike on every process.

A synthetic data set, a random target function, a train/validation split (``random_split``, ``randperm``, scikit-learn's ``train_test_split`` or a splitter
that shuffles, ``KFold(shuffle=True)``, ``ShuffleSplit``, with no ``random_state``) or a
random projection kept outside the model, drawn before training from an unseeded generator, come out different
on each process: the processes then solve different problems (and an early stop on convergence may never come).
The model's own initial weights do not matter (``prepare`` broadcasts process 0's), so this is about the other
draws. Samples drawn right into a data set (``TensorDataset(torch.randn(n, d), torch.randn(n, 1))``, each
value used once) are left to differ: every process then trains on its own samples of the same distribution,
which is what data-parallel training assumes of a data set; a value the script names (inputs it computes a
target from, the target's weights, a projection) or a split is seeded. Where the script sets no seed before them, the seed of each library they draw from is set, with the
script's own spelling, before the first statement that uses the random state (the first draw, or the model
built before it): ``torch.manual_seed(0)``, ``np.random.seed(0)``, ``random.seed(0)``, importing the library as a
module where the program draws from it elsewhere only (``random.shuffle`` in a data module, ``from numpy.random import
rand``): ``import random``. The same lines under ``accelify.runtime`` and Hugging Face Accelerate. The script was not
reproducible before; it now is, and one process computes what the original computed from a fresh seed 0.

Seeded alike, the processes would then draw alike for the rest of the run too: the same noise for a GAN's fake
batch at every step, the same dropout masks and random augmentations, so N processes' fake batches are copies of one
another. So right after the last statement that draws a shared value, every process but process 0 seeds each of
those libraries again with its index (``if accelerator.process_index > 0: torch.manual_seed(accelerator.process_index)``,
what ``set_seed(seed, device_specific=True)`` does in both runtimes, except that process 0 goes on with its stream,
so one process still computes what the original computed from seed 0). A prepared loader's shuffle does not depend
on it (process 0's permutation is used on every process, in both runtimes). Where the accelerator does not exist yet
after the last shared draw (drawn at import time, the accelerator made in ``main()``), that goes right before the
statement that trains in a block walked after it; where no such place is found, the draws are left and reported.

Where no prepared loader feeds training and the training loop draws its data as it goes (batches sampled at
random, episodes), one seed would make every process draw the same batches: the draws are left as they are,
with ACC032, as they are where the library that draws is not imported under a name the seed can use.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.roles import is_module_scope
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.tree_walk import descendants
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

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
_SEED_LINES = {"torch": ("torch", "{}.manual_seed(0)"), "numpy": ("numpy", "{}.random.seed(0)"), "random": ("random", "{}.seed(0)")}
_WRAPS = ("torch.nn.DataParallel", "torch.nn.parallel.")


class SeedSharedDraws(Rule):
    name = "shared_draws"
    description = "Seed values drawn at random before training, so every process draws the same ones."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
x = torch.randn(64, 4)
y = x @ torch.randn(4, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
torch.manual_seed(0)
x = torch.randn(64, 4)
y = x @ torch.randn(4, 1)
if accelerator.process_index > 0:
    torch.manual_seed(accelerator.process_index)
loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for xb, yb in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(xb), yb))
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            # seeded before the draws: the same values on every process already
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(1)
x = torch.randn(64, 4)
loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in loader:
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
torch.manual_seed(1)
x = torch.randn(64, 4)
loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for xb, yb in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(xb), yb))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a target drawn before training, batches drawn in the loop: one seed would give every process the
            # same batches, so it is reported
            before='''\
import torch
w_true = torch.randn(4, 1)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    x = torch.randn(16, 4)
    torch.nn.functional.mse_loss(model(x), x @ w_true).backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
w_true = torch.randn(4, 1)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(8):
    x = torch.randn(16, 4)
    accelerator.backward(torch.nn.functional.mse_loss(model(x), x @ w_true))
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC032:2",),
        ),
    )

    def recheck(self, ctx: Context) -> None:
        """Converted code: values drawn before training from a generator still unseeded (ACC032)."""
        self._seed(ctx, edit=False)

    def run(self, ctx: Context) -> None:
        if ctx.accelerating:
            self._seed(ctx, edit=True)

    def _seed(self, ctx: Context, *, edit: bool) -> None:
        walk = _Walk(ctx)
        home = ctx.plan.home
        if not walk.block(ctx.facts.module_scope.body, ctx.facts.module_scope) and home is not None:
            walk.block(home.body, home)  # a ``main()`` the script does not call itself (an entry point)
        if walk.draw is None or walk.first is None:
            return
        stmt, scope = walk.first
        draw = walk.draw.node
        if not ctx.plan.feeds_training() and _draws_while_training(ctx):
            ctx.warn(codes.UNSEEDED_DRAWS, draw, name=code_of(draw.func), why="the training loop also draws its data as it goes")
            return
        lines = []
        imports: list[str] = []  # libraries drawn from elsewhere that this module does not import whole: imported
        for library in sorted(walk.unseeded):
            module, line = _SEED_LINES[library]
            alias = next((local for local, full in scope.imports.aliases.items() if full == module), None)
            if alias is None:
                if module in _bound_names(ctx, scope):
                    ctx.warn(codes.UNSEEDED_DRAWS, draw, name=code_of(draw.func), why=f"`{module}` is not imported as a module here")
                    return
                alias = module
                imports.append(module)
            lines.append(line.format(alias))
        if not edit:
            ctx.warn(codes.UNSEEDED_DRAWS, draw, name=code_of(draw.func), why="no seed is set before them")
            return
        if ctx.is_skipped(stmt) or stmt in ctx.edits.removed:
            ctx.warn(codes.UNSEEDED_DRAWS, draw, name=code_of(draw.func), why="the statement before which the seed goes is skipped")
            return
        own = _own_streams(ctx, walk, lines)
        if own is None:
            ctx.warn(codes.UNSEEDED_DRAWS, draw, name=code_of(draw.func),
                     why="no place after them where the accelerator exists was found to give each process its own "
                         "stream again (seeded alike, every process would draw the same noise and dropout while training)")
            return
        ctx.insert_before(stmt, lines)
        for module in imports:
            _import_module(ctx, scope, module)
        place, code, after = own
        (ctx.insert_after if after else ctx.insert_before)(place, code)
        ctx.change("seed the values drawn before training alike on every process, then each process its own stream")


def _bound_names(ctx: Context, scope: Scope) -> set[str]:
    """Every name bound anywhere in ``scope``'s module (a module name imported for the seed must not shadow one)."""
    unit = ctx.facts.unit_of(scope)
    return {key for s in ctx.facts.scopes if ctx.facts.unit_of(s) is unit for key in s.bindings}


def _import_module(ctx: Context, scope: Scope, module: str) -> None:
    """``import random`` at the top of ``scope``'s module, for the seed of draws its program makes elsewhere (a data
    module's ``random.shuffle``) or through names (``from numpy.random import shuffle``)."""
    ctx.add_import(ctx.facts.unit_of(scope).module, cst.parse_statement(f"import {module}\n"))


def _own_streams(ctx: Context, walk: "_Walk", lines: list[str]) -> tuple[cst.BaseStatement, list[str], bool] | None:
    """Where and what gives each process its own stream again once the shared values are drawn: right after the last
    statement that draws them (or, where the accelerator does not exist there yet, right before a statement that
    trains, in a block the walk entered after it), each library the seed ``lines`` set seeded again with the process's
    index on every process but process 0, which goes on with the stream the original drew from (so one process
    computes what the original computed from seed 0). Seeded alike and left so, every process would draw the same
    noise, dropout masks and random augmentations at every step (the GAN's fake batches copies of one another).
    Returns the statement, the code, and whether it goes after the statement; None where no such place has the
    accelerator."""
    assert walk.last is not None
    places = [(walk.last, True)] + [(t, False) for t in walk.trains[walk.last_block:] if t[0] is not walk.first[0]]  # type: ignore[index]
    if any(walk.last[0] is stmt for stmt, _ in walk.trains):  # drawn by a statement that trains (in the trainer it builds): not after it
        places = places[1:]
    loop = walk.header_draw
    if loop is not None and isinstance(loop.body, cst.IndentedBlock):  # the folds are drawn as the loop starts:
        scope = next(sc for st, sc in walk.trains if st is loop)
        places = [((loop.body.body[0], scope), False)]  # each process's own stream from its first statement
    for (stmt, scope), after in places:
        accelerator = ctx.accelerator_in(scope)
        if accelerator is None or not ctx.after_accelerator(scope, stmt) or ctx.is_skipped(stmt) or stmt in ctx.edits.removed:
            continue
        seeds = "\n".join("    " + line.replace("(0)", f"({accelerator}.process_index)") for line in lines)
        code = [f"if {accelerator}.process_index > 0:\n{seeds}"]
        return stmt, code, after
    return None


class _Walk:
    """The program's statements in the order they run, from the top of the script to the first that trains:
    the first draw from an unseeded generator, and the first statement that uses the random state."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.plan = ctx.plan
        self.seeded: set[str] = set()
        self.unseeded: set[str] = set()
        self.draw: CallSite | None = None
        self.first: tuple[cst.BaseStatement, Scope] | None = None
        self.last: tuple[cst.BaseStatement, Scope] | None = None  # the last statement that draws a shared value
        self.trains: list[tuple[cst.BaseStatement, Scope]] = []  # the statement that trains, of each block walked
        self.last_block = 0  # the index in ``trains`` of the block ``last`` is in
        self.seen: set[int] = set()
        self.samples = {  # ``TensorDataset(torch.randn(n, d), torch.randn(n, 1))``: samples, each drawn once
            _chain_root(arg.value) for site in ctx.facts.calls if site.qualname == "torch.utils.data.TensorDataset"
            for arg in site.node.args
        }
        self.seed_values = {  # ``random.seed(opt.manualSeed)``: a seed drawn at random is not a problem's value
            code_of(site.node.args[0].value) for site in ctx.facts.calls
            if site.node.args and _seeder(site.qualname or "")
        }
        # ``self.kf = KFold(n, shuffle=True)``: the names an unseeded splitter is kept in; it draws at ``.split``
        self.splitters = {code_of(t.target) for site in ctx.facts.calls
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
        first, last = self.ctx.facts.order[stmt]
        return [s for s in scope.calls if first <= self.ctx.facts.order[s.stmt][0] <= last]

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
                if callee.class_scope is not None and is_module_scope(callee.class_scope, self.ctx.facts.classes):
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


def _draws_while_training(ctx: Context) -> bool:
    """Whether a training loop draws from a global generator as it goes (through the functions it calls)."""
    plan = ctx.plan
    seen: set[int] = set()

    def draws(sites: list[CallSite]) -> bool:
        for site in sites:
            if _library(site) is not None or site.method in ("sample", "rsample"):
                return True
            function = plan.callee(site)
            if function is not None and id(function) not in seen:
                seen.add(id(function))
                if draws(function.calls):
                    return True
        return False

    return any(draws(loop.calls) for loop in ctx.facts.loops if any(plan.reaches_backward(s) for s in loop.calls))
