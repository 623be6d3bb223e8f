"""SeedPerProcess: without a prepared data loader, each process draws its own data (or is told it trains
on the same data as the others).

When no training loop walks a prepared loader (a reinforcement-learning loop playing episodes, batches
drawn at random offsets of a tensor), every process would draw exactly the same data from the same
seed: N processes computing one gradient N times. The seeds the script sets after the accelerator
exists get ``+ accelerator.process_index``: process 0 keeps the script's seed (so one process computes
what the original did), the others draw their own. The initial weights still agree: ``prepare``
broadcasts process 0's. A training loop fed neither by a prepared loader nor by random draws (a tensor
sliced by the loop) trains on the same data on every process: that is correct but no faster, and is
reported (ACC022).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.early_seeds import reseed, runs_before
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.analysis.facts import CallSite, Loop
from accelify.codemods.analysis.batch_generators import generator_draw, ranged
from accelify.codemods.analysis.problems import UNKNOWN_DATA
from accelify.codemods.analysis.tree_walk import descendants
from accelify.codemods.engine.rule import Example, Rule

SEEDERS = {
    "torch.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "random.seed",
    "numpy.random.seed", "np.random.seed",
}


class SeedPerProcess(Rule):
    name = "seeds"
    description = "Give each process its own seed when no prepared data loader splits the data."
    examples = (
        Example(
            before='''\
import torch
torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    x = torch.randn(8, 2)
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
torch.manual_seed(0 + accelerator.process_index)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(4):
    x = torch.randn(8, 2)
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for (x,) in loader:
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(  # seeded before the accelerator exists: every process but 0 seeds again right after it
            before='''\
import torch
torch.manual_seed(1337)
def main():
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
main()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
torch.manual_seed(1337)
def main():
    accelerator = Accelerator(cpu=True)
    if accelerator.process_index > 0:
        torch.manual_seed(1337 + accelerator.process_index)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(4):
        accelerator.backward(model(torch.randn(4, 8)).sum())
        optimizer.step()
    accelerator.end_training()
main()
''',
        ),
        Example(  # the key is computed: which items the dict holds is not known, so they are not prepared
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loaders = {}
for name in names:
    loaders[name] = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loaders["train"]:
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
loaders = {}
for name in names:
    loaders[name] = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for (x,) in loaders["train"]:
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC053:8",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating or ctx.plan.feeds_training():
            return
        if not _draws_while_training(ctx):
            training = [lp for lp in ctx.facts.loops if any(ctx.plan.reaches_backward(s) for s in lp.calls)]
            loop = training[0] if training else None
            if loop is not None and not _walks_data(loop):
                # ``for epoch in range(2)`` around ``for i in range(0, ids.size(1) - n, n): x = ids[:, i:i+n]``:
                # the inner loop slices the data
                # ``for x, y in generator_train:`` walks a batch generator of the program's own (a library's data
                # the plan followed is the refusals and plan_warnings rules' to report: ``UNKNOWN_DATA``)
                unknown = {id(n) for p in ctx.plan.problems if p.kind == UNKNOWN_DATA for n in descendants(p.node)}
                loop = next((lp for lp in training if _walks_data(lp) and (_slices(lp) or not ranged(lp))
                             and id(lp.node.iter) not in unknown and not any(id(n) in unknown for n in descendants(lp.node.iter))), loop)
            if loop is None:
                draw = _wrapped_loader_draw(ctx)
                if draw is not None and ctx.accelerator_in(draw.scope) is not None:
                    ctx.warn(codes.SAME_DATA, draw.node)
                return
            reported = any(node is loop.node.iter for node, _ in ctx.warnings)
            if not reported and ctx.accelerator_in(loop.scope) is not None:
                # (the epoch loop around it, ``for epoch in range(2)``, is the first that trains)
                held = next(((lp, item) for lp in training if (item := _loader_in_dict_item(ctx, lp)) is not None), None)
                if held is not None:
                    ctx.warn(codes.LOADER_IN_DICT_ITEM, held[0].node.iter, name=held[1])
                elif _walks_data(loop):
                    ctx.warn(codes.SAME_DATA, loop.node.iter)
                elif (draw := generator_draw(ctx.facts, ctx.plan)) is not None and ctx.accelerator_in(draw.scope) is not None:
                    ctx.warn(codes.SAME_DATA, draw.node)
            return
        for site in ctx.facts.calls:
            seed = _seed_argument(site)
            accelerator = ctx.accelerator_in(site.scope)
            if seed is None or accelerator is None or not ctx.after_accelerator(site.scope, site.stmt):
                continue
            if "process_index" in code_of(seed) or "rank" in code_of(seed):
                continue
            if not ctx.agreement.uniform(site.scope, seed, site.stmt):
                continue  # ``1337 + seed_offset`` where ``seed_offset = ddp_rank``: already each process's own
            if ctx.replace(seed, site.stmt, lambda n, a=accelerator: _offset(n, a)):  # type: ignore[misc]
                ctx.change("seed each process on its own: seed + accelerator.process_index")
        # a generator of the program's own that shuffles all of its data as it goes (``np.random.shuffle(indices)``
        # in ``train_generator``): each process walks every batch, in an order of its own
        draw = generator_draw(ctx.facts, ctx.plan)
        if draw is not None and ctx.accelerator_in(draw.scope) is not None:
            ctx.warn(codes.SAME_DATA, draw.node)
        _reseed_after_creation(ctx)


def _library(site: CallSite) -> str:
    return (site.qualname or "").replace("np.", "numpy.", 1).split(".", 1)[0]


def _reseed_after_creation(ctx: Context) -> None:
    """``torch.manual_seed(1337)`` at module level, the accelerator made later (in ``__main__``, in ``main()``), and
    a training that draws its batches as it goes: every process would draw the same batches. Right after the
    accelerator is created, every process but process 0 seeds that library again with the script's seed plus its
    index (``if accelerator.process_index > 0: torch.manual_seed(1337 + accelerator.process_index)``; process 0 goes
    on with its stream, so it computes what the original did; a seed that is not a number reads the one torch keeps,
    ``torch.initial_seed()``). Where neither the seed nor its place is known, ACC022 says so. Only where no loader
    is prepared: a prepared one gives each process its own batches."""
    if any(o.role == "loader" for o in ctx.plan.objects):
        return  # a prepared loader serves the data (through a generator of the program's own, say): not the same
    home = ctx.plan.home
    accelerator = ctx.accelerator_in(home) if home is not None else None
    anchor = (ctx.created[1], True) if ctx.created is not None else ctx.plan.analysis(Creation).anchor
    seeded = {_library(s) for s in ctx.facts.calls if _seed_argument(s) is not None and s.qualname in SEEDERS
              and ctx.accelerator_in(s.scope) is not None and ctx.after_accelerator(s.scope, s.stmt)}
    early: dict[str, tuple[CallSite, cst.BaseExpression]] = {}
    for site in ctx.facts.calls:
        seed = _seed_argument(site)
        if seed is None or site.qualname not in SEEDERS or _library(site) in seeded:
            continue
        if ctx.accelerator_in(site.scope) is not None and ctx.after_accelerator(site.scope, site.stmt):
            continue
        if home is None or accelerator is None or anchor is None or not runs_before(
                site, lambda sc: ctx.accelerator_in(sc) is not None, ctx.after_accelerator, ctx.plan.call_sites, home,
                ctx.facts.after):
            ctx.warn(codes.SAME_DATA, site.node)  # a seed the accelerator's place cannot be shown to follow
            continue
        early[code_of(site.node.func)] = (site, seed)
    lines = []
    for site, seed in early.values():
        line = reseed(site, seed, home, accelerator)  # type: ignore[arg-type]
        if line is None:
            ctx.warn(codes.SAME_DATA, site.node)
        else:
            lines.append(line)
    if not lines:
        return
    code = f"if {accelerator}.process_index > 0:\n" + "".join(f"    {line}\n" for line in lines)
    at, after = anchor  # type: ignore[misc]
    if after:
        ctx.insert_after(at, [code], ungrouped=True)
    else:
        ctx.insert_before(at, [code], ungrouped=True)
    ctx.change("seed each process on its own right after the accelerator is created: seed + accelerator.process_index")


_DRAWS = ("torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.multinomial", "torch.normal",
          "torch.bernoulli", "random.", "numpy.random.", "np.random.")


def _draws_while_training(ctx: Context) -> bool:
    """Whether a training loop draws its data at random as it goes (offsets, episodes, samples): then each
    process must draw its own. Data made once before training is the same on every process, as it should be."""
    plan = ctx.plan
    seen: set[int] = set()

    def draws(sites: list[CallSite]) -> bool:
        for site in sites:
            if (site.qualname or "").startswith(_DRAWS) or site.method in ("sample", "rsample"):
                return True
            function = plan.callee(site)
            if function is not None and id(function) not in seen:
                seen.add(id(function))
                if draws(function.calls):
                    return True
        return False

    return any(draws(loop.calls) for loop in ctx.facts.loops if any(plan.reaches_backward(s) for s in loop.calls))


def _wrapped_loader_draw(ctx: Context) -> CallSite | None:
    """makemore's ``batch = batch_loader.next()`` in ``while True:``: a training ``while`` loop drawing its batches
    from an object of a class of the program that holds a DataLoader of its own (``self.train_loader =
    DataLoader(...)`` in its ``__init__``). That loader is never prepared: every process draws from all of the data
    (the same batches, from the same seed). The draw, or None."""
    facts, plan = ctx.facts, ctx.plan
    holders = {
        scope.name for scope in facts.scopes
        if scope.kind == "class" and any(b.role == "loader" for bs in scope.bindings.values() for b in bs)
    }
    if not holders:
        return None
    for site in facts.calls:
        loop = next((st for st in facts.chain(site.stmt)[1:] if isinstance(st, cst.While)), None)
        if loop is None:
            continue
        func = site.node.func
        if isinstance(func, cst.Attribute):
            receiver: cst.BaseExpression = func.value
        elif site.qualname == "next" and site.node.args:
            receiver = site.node.args[0].value
        else:
            continue
        binding = plan.origin(site.scope, receiver)
        value = binding.value if binding is not None else None
        if not isinstance(value, cst.Call) or (code_of(value.func).rsplit(".", 1)[-1] not in holders):
            continue
        if any(plan.reaches_backward(s) for s in facts.calls if loop in facts.chain(s.stmt)[1:]):
            return site
    return None


def _loader_in_dict_item(ctx: Context, loop: Loop) -> str | None:
    """``loaders['train']`` when the loop walks an item of a dict (through ``enumerate``/a progress bar) and the
    program stores a ``DataLoader(...)`` into an item of that key, or into any item of a dict of that name
    (``loaders[name] = DataLoader(...)``), in a way the plan cannot follow (``analysis/filled_dicts.py``: a computed
    key, a dict filled by the function it is passed to, an item stored again later): ACC022's "no DataLoader" would
    be false there."""
    source = ctx.plan.loop_source(loop)
    if not isinstance(source, cst.Subscript):
        return None
    key, holder = _string_key(source), code_of(source.value)
    for site in ctx.facts.calls:
        small = site.stmt.body[0] if isinstance(site.stmt, cst.SimpleStatementLine) else None
        if isinstance(small, cst.Assign) and small.value is site.node and (site.qualname or "").endswith("DataLoader") \
                and any((key is not None and _string_key(t.target) == key)
                        or (isinstance(t.target, cst.Subscript) and code_of(t.target.value) == holder) for t in small.targets):
            return code_of(source)
    return None


def _string_key(expr: cst.BaseExpression) -> str | None:
    """``"train"`` of ``loaders["train"]``."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(index := expr.slice[0].slice, cst.Index) \
            and isinstance(index.value, cst.SimpleString):
        key = index.value.evaluated_value
        return key if isinstance(key, str) else None
    return None


def _walks_data(loop: Loop) -> bool:
    """Whether the loop's iterable reads a variable of the script (``range(0, train_data.size(0), bptt)``), not
    only literals and modules (``torch.ones(4, 2)``)."""
    imports = loop.scope.imports.aliases
    return any(
        isinstance(n, cst.Name) and n.value not in imports and loop.scope.resolve(n.value) is not None
        for n in m.findall(loop.node.iter, m.Name())
    )


def _slices(loop: Loop) -> bool:
    """Whether the loop's body indexes a tensor by the loop's variable (``ids[:, i:i + n]``, ``data[i]``)."""
    for sub in m.findall(loop.node.body, m.Subscript()):
        assert isinstance(sub, cst.Subscript)
        used = {n.value for el in sub.slice for n in m.findall(el, m.Name())}  # type: ignore[attr-defined]
        if used & set(loop.targets) and isinstance(sub.value, cst.Name) and sub.value.value not in loop.targets:
            return True
    return False


def _seed_argument(site: CallSite) -> cst.BaseExpression | None:
    """The seed a call sets: ``torch.manual_seed(s)``, ``random.seed(s)``, ``env.seed(s)``, ``env.reset(seed=s)``."""
    for arg in site.node.args:
        if arg.keyword is not None and arg.keyword.value == "seed" and site.method in ("reset", "seed"):
            return arg.value
    if (site.qualname in SEEDERS or site.method == "seed") and site.node.args and site.node.args[0].keyword is None:
        return site.node.args[0].value
    return None


def _offset(seed: cst.CSTNode, accelerator: str) -> cst.CSTNode:
    assert isinstance(seed, cst.BaseExpression)
    return expression(f"{code_of(seed)} + {accelerator}.process_index")
