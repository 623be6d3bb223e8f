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
read there, as do those of the program's functions and methods that only that top level runs (a data set class's
sizes). ``click.echo(message)`` and its kind print once too (``engine/echo_prints.py``).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.import_time import LITERAL_CPU, EntryLevel, before_exit, import_time_prints
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule
from accelify.codemods.engine.echo_prints import echo_statements
from accelify.codemods.engine.print_state import helper_prints, print_parameters, prints_before_creation


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
            # the message of a process that stops right after it (``sys.exit``): accelerator.print would hide it when
            # that process is not the main one
            before='''\
import sys
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    if torch.isnan(loss):
        print("the loss is nan")
        sys.exit(1)
    loss.backward()
    optimizer.step()
''',
            after='''\
import sys
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    if torch.isnan(loss):
        print("the loss is nan")
        sys.exit(1)
    accelerator.backward(loss)
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a helper the entry block calls before ``main()`` makes the accelerator: its print goes through the process
            # state made with the accelerator's own ``cpu`` (``PartialState(cpu=True).print``: once, not once per process)
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
from accelify.runtime import Accelerator, PartialState

def log(message):
    PartialState(cpu=True).print(message)

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
        echo_statements(ctx)
        if not ctx.notebook:
            _import_time(ctx)
            _entry_level(ctx)
            helper_prints(ctx)
            prints_before_creation(ctx)
        print_parameters(ctx)


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
    done = [site for site in sites if ctx.replace(site.node.func, site.stmt, lambda _, f=state: f)]  # type: ignore[misc]
    for unit in dict.fromkeys(site.scope.unit for site in done):  # (a data set's module the script calls: U15)
        if unit != entry.home.unit:
            _import_state(ctx, unit)
    if done:
        ctx.change("print at the script's top level -> PartialState().print")


def _import_state(ctx: Context, unit: str) -> None:
    """``from <runtime> import PartialState`` after the top imports of the local module ``unit`` (once)."""
    ctx.import_state(unit)
