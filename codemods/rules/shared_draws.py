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
random, episodes), the seed again per process after the shared draws gives each process its own batches, as each
process's own shard would. The draws are left, with ACC032, where the library that draws is not imported under a
name the seed can use.

What is drawn before training, from which generator, what is seeded and where the random state is first used is
``analysis/draws_before_training.py``'s; this rule writes the seeds or reports why it cannot.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.draws_before_training import SHARED_DRAWS, DrawWalk
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_SEED_LINES = {"torch": ("torch", "{}.manual_seed(0)"), "numpy": ("numpy", "{}.random.seed(0)"), "random": ("random", "{}.seed(0)")}


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
            # NumPy's generator drawn through ``from numpy.random import rand`` in a module that binds ``numpy`` to
            # something else: no name to seed it by, so it is reported
            before='''\
import torch
from numpy.random import rand
numpy = None
w_true = torch.from_numpy(rand(4, 1)).float()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    x = torch.randn(16, 4)
    torch.nn.functional.mse_loss(model(x), x @ w_true).backward()
    optimizer.step()
''',
            after='''\
import torch
from numpy.random import rand
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
numpy = None
w_true = torch.from_numpy(rand(4, 1)).float()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(8):
    x = torch.randn(16, 4)
    accelerator.backward(torch.nn.functional.mse_loss(model(x), x @ w_true))
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC032:4",),
        ),
        Example(
            # a target drawn before training, batches drawn in the loop: the target is seeded alike, and each process
            # draws its own batches again after it (the regression of issue 23's class 8 hung on 2 processes)
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
torch.manual_seed(0)
w_true = torch.randn(4, 1)
if accelerator.process_index > 0:
    torch.manual_seed(accelerator.process_index)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(8):
    x = torch.randn(16, 4)
    accelerator.backward(torch.nn.functional.mse_loss(model(x), x @ w_true))
    optimizer.step()
accelerator.end_training()
''',
        ),
    )

    def recheck(self, ctx: Context) -> None:
        """Converted code: values drawn before training from a generator still unseeded (ACC032)."""
        self._seed(ctx, edit=False)

    def run(self, ctx: Context) -> None:
        if ctx.accelerating:
            self._seed(ctx, edit=True)

    def _seed(self, ctx: Context, *, edit: bool) -> None:
        walk = DrawWalk(ctx.facts, ctx.plan)
        home = ctx.plan.home
        if not walk.block(ctx.facts.module_scope.body, ctx.facts.module_scope) and home is not None:
            walk.block(home.body, home)  # a ``main()`` the script does not call itself (an entry point)
        if walk.draw is None or walk.first is None:
            return
        stmt, scope = walk.first
        draw = walk.draw.node
        lines = []
        imports: list[str] = []  # libraries drawn from elsewhere that this module does not import whole: imported
        for library in sorted(walk.unseeded):
            module, line = _SEED_LINES[library]
            alias = scope.imports.alias_of(module)
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
        ctx.change(SHARED_DRAWS)


def _bound_names(ctx: Context, scope: Scope) -> set[str]:
    """Every name bound anywhere in ``scope``'s module (a module name imported for the seed must not shadow one)."""
    unit = ctx.facts.unit_of(scope)
    return {key for s in ctx.facts.scopes if ctx.facts.unit_of(s) is unit for key in s.bindings}


def _import_module(ctx: Context, scope: Scope, module: str) -> None:
    """``import random`` at the top of ``scope``'s module, for the seed of draws its program makes elsewhere (a data
    module's ``random.shuffle``) or through names (``from numpy.random import shuffle``)."""
    ctx.add_import(ctx.facts.unit_of(scope).module, cst.parse_statement(f"import {module}\n"))


def _own_streams(ctx: Context, walk: DrawWalk, lines: list[str]) -> tuple[cst.BaseStatement, list[str], bool] | None:
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
