"""SwapPrint: ``print(...)`` once the accelerator exists -> ``accelerator.print(...)`` (once per machine).

A plain function the accelerator is not threaded into that runs only once it exists (every call of it after the
accelerator, in a scope that has it, or in another such function) prints through ``PartialState().print``, the
accelerator's state (a helper printing a sample's label, a data helper printing ``df.head()``: each line came N
times). The prints of the scope that makes the accelerator, above the statement it is made at (a script's data
preparation, when the accelerator is made where its torch model is built), go through ``PartialState(<the
accelerator's cpu>).print``. Prints in functions called before it exists stay as they are, but for what a
local module prints while it is imported (a data module that reports as it loads: ``print("Number of samples:", n)``
at its top level, or in a function its top level calls). That import runs on every process before the accelerator
exists, so each line came N times: it goes through the runtime's ``PartialState``, the process facts the accelerator
is later made on, ``PartialState(cpu=True).print(...)`` (once per machine, as ``accelerator.print``). The state is made
with the accelerator's own ``cpu`` setting (Hugging Face Accelerate keeps the device of the first state a process
makes and would ignore a later ``cpu=True``); where that setting is an expression the module cannot read at import
time (``cpu=args.no_cuda``), the prints are left as they are and reported (ACC056). A notebook imports its modules
once, in the process that launches the others: left alone. The same holds for the training script's own top level
where the accelerator is made in a function (``print(VERSION)`` before ``main(args)``, the elapsed time after it): those
prints go through ``PartialState(...).print`` too, or are reported (ACC057) where the accelerator's ``cpu`` cannot be
read there.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.import_time import LITERAL_CPU, EntryLevel, before_exit, import_time_prints
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


# a data module that reports its size while the script imports it (the examples of several files)
_DATA = '''\
import torch
from torch.utils.data import TensorDataset
train = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
print("Training set [{}]".format(len(train)))
'''


class SwapPrint(Rule):
    name = "print"
    description = "Print once per machine with accelerator.print."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch, x in enumerate(torch.ones(4, 2)):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for epoch, x in enumerate(torch.ones(4, 2)):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
accelerator.end_training()
''',
        ),
        Example(
            # a helper called before the accelerator exists (from the entry block, before ``main()``) keeps its print
            before='''\
import torch

def log(message):
    print(message)

def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()

if __name__ == "__main__":
    log("starting")
    main()
''',
            after='''\
import torch
from accelify.runtime import Accelerator

def log(message):
    print(message)

def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.end_training()

if __name__ == "__main__":
    log("starting")
    main()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch

def log(message):
    print(message)

def main():
    log("building")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
''',
            # a helper the accelerator is not threaded into, called once it exists: its print goes through the state
            after='''\
import torch
from accelify.runtime import Accelerator
from accelify.runtime import PartialState

def log(message):
    PartialState().print(message)

def main():
    accelerator = Accelerator(cpu=True)
    log("building")
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader
from data import train
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(train, batch_size=4):
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader
from data import train
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x, y in accelerator.prepare(DataLoader(train, batch_size=4)):
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.end_training()
''',
            modules=(("data.py", _DATA, '''\
import torch
from torch.utils.data import TensorDataset
from accelify.runtime import PartialState
train = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
PartialState(cpu=True).print("Training set [{}]".format(len(train)))
'''),),
        ),
        Example(
            before='''\
import argparse
import torch
from torch.utils.data import DataLoader
from data import train
parser = argparse.ArgumentParser()
parser.add_argument("--cuda", action="store_true")
args = parser.parse_args()
device = torch.device("cuda" if args.cuda else "cpu")
model = torch.nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(train, batch_size=4):
    torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
    optimizer.step()
''',
            after='''\
import argparse
import torch
from torch.utils.data import DataLoader
from data import train
from accelify.runtime import Accelerator
parser = argparse.ArgumentParser()
parser.add_argument("--cuda", action="store_true")
args = parser.parse_args()
accelerator = Accelerator(cpu=not args.cuda)
device = accelerator.device
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x, y in accelerator.prepare(DataLoader(train, batch_size=4)):
    accelerator.backward(torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)))
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC056:data.py:4",),
            modules=(("data.py", _DATA, None),),
        ),
        Example(
            # the script's top level prints around the call of the function that makes the accelerator
            before='''\
import time
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.ones(8, 2), torch.ones(8, 1)), batch_size=4):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    start = time.time()
    main()
    print(f"done in {time.time() - start:.1f} s")
''',
            after='''\
import time
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator, PartialState


def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x, y in accelerator.prepare(DataLoader(TensorDataset(torch.ones(8, 2), torch.ones(8, 1)), batch_size=4)):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    start = time.time()
    main()
    PartialState(cpu=True).print(f"done in {time.time() - start:.1f} s")
''',
        ),
        Example(
            # the same with an accelerator whose ``cpu`` the top level cannot read: reported
            before='''\
import argparse
import time
import torch
from torch.utils.data import DataLoader, TensorDataset


def main(args):
    device = torch.device("cuda" if args.cuda else "cpu")
    model = torch.nn.Linear(2, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.ones(8, 2), torch.ones(8, 1)), batch_size=4):
        torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args()
    start = time.time()
    main(args)
    print(f"done in {time.time() - start:.1f} s")
''',
            after='''\
import argparse
import time
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main(args):
    accelerator = Accelerator(cpu=not args.cuda)
    device = accelerator.device
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x, y in accelerator.prepare(DataLoader(TensorDataset(torch.ones(8, 2), torch.ones(8, 1)), batch_size=4)):
        accelerator.backward(torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)))
        optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args()
    start = time.time()
    main(args)
    print(f"done in {time.time() - start:.1f} s")
''',
            warnings=("ACC057:22",),
        ),
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if site.qualname != "print" or not isinstance(site.node.func, cst.Name):
                continue
            if site.scope.resolve("print") is not None or not ctx.after_accelerator(site.scope, site.stmt):
                continue
            if before_exit(ctx.facts, site.stmt):
                continue  # the message of the process that stops (rank 1's would be hidden by accelerator.print)
            accelerator = ctx.accelerator_in(site.scope)
            func = expression(f"{accelerator}.print")
            if ctx.replace(site.node.func, site.stmt, lambda _, f=func: f):  # type: ignore[misc]
                ctx.change("print -> accelerator.print")
        if not ctx.notebook:
            _import_time(ctx)
            _entry_level(ctx)
            _helpers(ctx)
            _before_creation(ctx)


def _import_time(ctx: Context) -> None:
    """The prints of the local modules' imports through ``PartialState(<the accelerator's cpu>).print``, with its
    import; reported (ACC056) where the accelerator's ``cpu`` is an expression the module cannot read."""
    by_unit: dict[str, list[CallSite]] = {}
    for site in import_time_prints(ctx.facts, ctx.plan):
        if not ctx.edits.replaced(site.node.func):
            by_unit.setdefault(site.scope.unit, []).append(site)
    if not by_unit:
        return
    cpu = ctx.plan.analysis(Creation).cpu_argument
    for unit, sites in by_unit.items():
        if cpu not in LITERAL_CPU:
            ctx.warn(codes.IMPORT_TIME_PRINTS, sites[0].stmt, module=unit, cpu=cpu)
            continue
        state = expression(f"PartialState({cpu}).print")
        if any([ctx.replace(site.node.func, site.stmt, lambda _, f=state: f) for site in sites]):  # type: ignore[misc]
            _import_state(ctx, unit)
            ctx.change(f"print while {unit} is imported -> PartialState().print")


def _entry_level(ctx: Context) -> None:
    """The prints at the script's own top level where the accelerator a function makes cannot reach (``print(VERSION)``
    before ``main(args)``, the elapsed time after it): through ``PartialState(<the accelerator's cpu>).print``
    (imported beside ``Accelerator`` by the imports rule where that is the same module), or reported (ACC057) where
    that ``cpu`` is an expression the top level cannot read (``analysis/import_time.py``)."""
    if not ctx.accelerating:
        return
    entry = ctx.plan.analysis(EntryLevel)
    sites = [s for s in entry.prints if not ctx.edits.replaced(s.node.func)]
    if not sites or entry.home is None:
        return
    if not entry.literal:
        ctx.warn(codes.ENTRY_PRINTS, sites[0].stmt, name=code_of(sites[0].node), function=entry.home.name, cpu=entry.cpu)
        return
    state = expression(f"PartialState({entry.cpu}).print")
    if any([ctx.replace(site.node.func, site.stmt, lambda _, f=state: f) for site in sites]):  # type: ignore[misc]
        if entry.home.unit != "__main__":
            _import_state(ctx, "__main__")
        ctx.change("print at the script's top level -> PartialState().print")


def _helpers(ctx: Context) -> None:
    """The prints of a plain function the accelerator is not threaded into, which runs only after the accelerator
    exists (every call of it is in a scope that has it, after it, or in another such function: S1's
    ``test_single_example(model, test_loader)`` printing a sample's label, a data helper printing ``df.head()``).
    Each process printed its line: they go through ``PartialState().print``, the accelerator's state (once per
    machine, as ``accelerator.print``)."""
    if not ctx.accelerating:
        return
    memo: dict[int, bool] = {}
    done: set[str] = set()
    for site in ctx.facts.calls:
        scope = site.scope
        if site.qualname != "print" or not isinstance(site.node.func, cst.Name) or scope.resolve("print") is not None \
                or ctx.edits.replaced(site.node.func) or ctx.accelerator_in(scope) is not None \
                or before_exit(ctx.facts, site.stmt) or not _runs_after_accelerator(ctx, scope, memo, frozenset()):
            continue
        if ctx.replace(site.node.func, site.stmt, lambda _: expression("PartialState().print")):
            if scope.unit not in done:
                done.add(scope.unit)
                _import_state(ctx, scope.unit)
            ctx.change("print in a helper called once the accelerator exists -> PartialState().print")


def _before_creation(ctx: Context) -> None:
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
    sites = [s for s in ctx.facts.calls if s.scope is home and s.qualname == "print" and isinstance(s.node.func, cst.Name)
             and ctx.facts.order[s.stmt][1] < start
             and home.resolve("print") is None and not ctx.edits.replaced(s.node.func)
             and not ctx.after_accelerator(s.scope, s.stmt) and not before_exit(ctx.facts, s.stmt)
             and not any(c in ctx.facts.skipped for c in ctx.facts.chain(s.stmt))]
    if any([ctx.replace(site.node.func, site.stmt, lambda _, f=state: f) for site in sites]):  # type: ignore[misc]
        _import_state(ctx, home.unit)
        ctx.change("print before the accelerator is made -> PartialState().print")
    # the functions and methods only that part of the scope calls (Q5's NumPy model's ``fit`` printing its epochs)
    memo: dict[int, bool] = {}
    for site in ctx.facts.calls:
        scope = site.scope
        if site.qualname != "print" or not isinstance(site.node.func, cst.Name) or scope.resolve("print") is not None \
                or ctx.edits.replaced(site.node.func) or ctx.accelerator_in(scope) is not None \
                or before_exit(ctx.facts, site.stmt) or not _runs_before_creation(ctx, scope, home, start, memo, frozenset()):
            continue
        if ctx.replace(site.node.func, site.stmt, lambda _, f=state: f):  # type: ignore[misc]
            _import_state(ctx, scope.unit)
            ctx.change("print in a helper called before the accelerator is made -> PartialState().print")


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
    """Whether the plain function ``scope`` is only called once the accelerator exists (see ``_helpers``)."""
    if id(scope) in memo:
        return memo[id(scope)]
    if scope.kind != "function" or scope.class_scope is not None or id(scope) in seen or ctx.plan.never_run(scope):
        return False
    sites = ctx.plan.run_sites(scope)
    result = bool(sites) and all(
        (ctx.accelerator_in(s.scope) is not None and ctx.after_accelerator(s.scope, s.stmt))
        or (ctx.accelerator_in(s.scope) is None and _runs_after_accelerator(ctx, s.scope, memo, seen | {id(scope)}))
        for s in sites)
    memo[id(scope)] = result
    return result


def _import_state(ctx: Context, unit: str) -> None:
    """``from <runtime> import PartialState`` after the top imports of the local module ``unit`` (once)."""
    ctx.import_state(unit)
