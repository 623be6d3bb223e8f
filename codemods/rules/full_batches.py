"""KeepFullBatches: a loop that skips a loader's short last batch keeps the original's samples on N processes.

``for x, y in test: if len(y) != 4: break`` evaluates only the full batches; a prepared loader completes its last
batch on every process, so on N processes that test never fires and the loop would take the short batch's samples
too. The loader is built to make only its full batches instead, by a sampler cut before the short batch
(``analysis/short_batches.py`` says why ``drop_last=True`` does not do it):

    test = DataLoader(test_set, batch_size=4)
    ->  test = DataLoader(test_set, batch_size=4, sampler=range(len(test_set) // 4 * 4))
    train = DataLoader(train_set, batch_size=bs, shuffle=True)
    ->  train = DataLoader(train_set, batch_size=bs, sampler=torch.utils.data.RandomSampler(train_set, num_samples=...))

On one process those are the original's batches (the same draws), the short one left out; the test stays and never
fires, on any process (so its ``break`` needs no ``set_trigger``). A data set built in the call is named where it is built (``DataLoader(test_dataset := TensorDataset(...),
...)``) so it is built once. Where the size compared is not provably the loader's batch size, or the loader cannot
take the sampler (its own sampler, an iterable data set, its length read, another loop walking it whole), the loader
is left as it is and the difference is reported (ACC047). So it is with ``--target accelerate`` for a loop that gathers
for metrics: Hugging Face Accelerate's ``gather_for_metrics`` counts the last round's duplicates from
``len(loader.dataset)``, which such a sampler makes wrong (7 of 8 samples on one process).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.facts import Binding
from accelify.codemods.analysis.short_batches import FullBatches, decisions, repeatable_dataset
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

class KeepFullBatches(Rule):
    name = "full_batches"
    description = "Build a loader with only its full batches where a loop skips its short last batch by size."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
train = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=4)
test_set = TensorDataset(torch.randn(11, 3), torch.randint(0, 2, (11,)))
test = DataLoader(test_set, batch_size=4)
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in train:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
correct = total = 0
with torch.no_grad():
    for x, y in test:
        if len(y) != 4:
            break
        out = model(x)
        correct += (out.argmax(1) == y).sum().item()
        total += y.size(0)
print("accuracy", correct, "/", total)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
train = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=4)
test_set = TensorDataset(torch.randn(11, 3), torch.randint(0, 2, (11,)))
test = DataLoader(test_set, batch_size=4, sampler=range(len(test_set) // 4 * 4))
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, train, test = accelerator.prepare(model, opt, train, test)
for x, y in train:
    opt.zero_grad()
    accelerator.backward(torch.nn.functional.cross_entropy(model(x), y))
    opt.step()
correct = total = 0
with torch.no_grad():
    for x, y in test:
        if len(y) != 4:
            break
        out = model(x)
        out, y = accelerator.gather_for_metrics((out, y))
        correct += (out.argmax(1) == y).sum().item()
        total += y.size(0)
accelerator.print("accuracy", correct, "/", total)
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
bs = 4
loader = DataLoader(TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), batch_size=bs, shuffle=True)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        if x.size(0) != bs:
            continue
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
bs = 4
loader = DataLoader(loader_dataset := TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), batch_size=bs, sampler=torch.utils.data.RandomSampler(loader_dataset, num_samples=len(loader_dataset) // bs * bs))
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
for epoch in range(2):
    for x, y in loader:
        if x.size(0) != bs:
            continue
        opt.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), batch_size=4, drop_last=True)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    if x.size(0) != 4:
        continue
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), batch_size=4, drop_last=True)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
for x, y in loader:
    if x.size(0) != 4:
        continue
    opt.zero_grad()
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    opt.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), batch_size=4)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    if x.size(0) != 8:
        continue
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), batch_size=4)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt, loader = accelerator.prepare(model, opt, loader)
for x, y in loader:
    if x.size(0) != 8:
        continue
    opt.zero_grad()
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    opt.step()
accelerator.end_training()
''',
            warnings=("ACC047:7",),
        ),
    )

    def run(self, ctx: Context) -> None:
        for decision in decisions(ctx.plan, ctx.target):
            if decision.parts is None:
                for skip in decision.skips:
                    ctx.warn(codes.SHORT_BATCH, skip.test, why=skip.problem or decision.problem or "")
                continue
            made = decision.parts.binding
            ctx.replace(decision.parts.call, made.stmt, _with_sampler(decision.parts, _fresh(made), decision.sampler))
            ctx.change("build the loader with only its full batches where a loop skips its short last batch")


    def recheck(self, ctx: Context) -> None:
        """Converted code: a skip whose loader is still left as it is is reported again (one built with full batches
        only is not a skip any more)."""
        for decision in decisions(ctx.plan, ctx.target):
            if decision.parts is None:
                for skip in decision.skips:
                    ctx.warn(codes.SHORT_BATCH, skip.test, why=skip.problem or decision.problem or "")


def _with_sampler(parts: FullBatches, fresh: str, sampler: str | None) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """The replacement of the loader's call: ``sampler=`` after ``batch_size``, ``shuffle=True`` dropped, and the data
    set named where it is built when it is not a name already."""
    named = repeatable_dataset(parts)
    dataset = named if named is not None else fresh
    size = code_of(parts.size)
    count = f"len({dataset}) // {size} * {size}"
    if sampler is None:
        code = f"range({count})"
    else:
        generator = f", generator={code_of(parts.generator)}" if parts.generator is not None else ""
        code = f"{sampler}({dataset}, num_samples={count}{generator})"

    def rewrite(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args: list[cst.Arg] = []
        positional = 0
        for arg in node.args:
            index = positional if arg.keyword is None else -1
            positional += arg.keyword is None
            key = arg.keyword.value if arg.keyword is not None else ("dataset", "batch_size", "shuffle")[index]
            if key == "shuffle" and parts.shuffle:
                continue
            if key == "dataset" and named is None:
                arg = arg.with_changes(value=cst.NamedExpr(target=cst.Name(fresh), value=arg.value))
            if key == "batch_size":
                last = arg is node.args[-1]
                comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if last else arg.comma
                args.append(arg.with_changes(comma=comma))
                args.append(cst.Arg(value=expression(code), keyword=cst.Name("sampler"),
                                    equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                                    comma=arg.comma))
                continue
            args.append(arg)
        args[-1] = args[-1].with_changes(comma=node.args[-1].comma)  # the call ends as it did
        return node.with_changes(args=args)

    return rewrite


def _fresh(made: Binding) -> str:
    """A name for the data set, free in the function that makes the loader: ``<loader>_dataset``."""
    scope = made.where
    base = f"{made.key}_dataset" if "." not in made.key else "dataset"
    used = set(scope.refs) | set(scope.bindings) | set(scope.param_names)
    name = base
    while name in used:
        name += "_"
    return name
