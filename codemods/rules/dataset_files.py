"""DatasetFilesFirst: a data set class that writes files while it is built is built on the main process first.

A ``Dataset`` of the program that makes a file when it is constructed (its ``__init__``, or a method ``__init__``
calls: a cache ``torch.save``d once, a list of triplets written with ``open(p, "w")`` then read back line by line)
writes it on every process at once, or, once converted, on the main process only (the writes and save rules, where
the data set has the accelerator at hand), while every process reads it back right away: the others find no file,
or half of one. So each statement that constructs the data set, where the
accelerator exists and every process runs it, goes under ``with accelerator.main_process_first():``: the main
process builds the data set and its files, the others then build theirs and find the files there
(``analysis/helper_calls.py``, as for a helper that downloads). Nothing in such a statement may reach the other
processes (the main process would wait in it for the others, which wait for it to leave): the save rule puts no
barrier before a save in a data set's methods (there is no training step to wait for), so a ``download()`` the
data set calls does not stop it. Where a construction cannot go there (in a loop, under a test each process decides
alone, before the accelerator exists), the write is reported (ACC018).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.dataset_kinds import dataset_class
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.handle_uses import Collectives
from accelify.codemods.analysis.helper_calls import first_ready, helper_calls
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.write_calls import writes_file
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.main_first import first_at
from accelify.codemods.engine.rule import Example, Rule

_SAVES = ("torch.save", "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "pickle.dump")


class DatasetFilesFirst(Rule):
    name = "dataset_files"
    description = "Build a data set that writes files when it is constructed on the main process first."
    examples = (
        Example(
            before='''\
import os
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, root):
        self.path = os.path.join(root, "pairs.txt")
        if not os.path.exists(self.path):
            self.write_pairs(16)
        self.pairs = np.loadtxt(self.path, dtype=np.float32)

    def write_pairs(self, n):
        with open(self.path, "w") as f:
            for i in range(n):
                f.write(f"{i} {i % 3}\\n")

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return torch.from_numpy(self.pairs[i])


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs("."), batch_size=4)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
''',
            after='''\
import os
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from accelify.runtime import Accelerator


class Pairs(Dataset):
    def __init__(self, root):
        self.path = os.path.join(root, "pairs.txt")
        if not os.path.exists(self.path):
            self.write_pairs(16)
        self.pairs = np.loadtxt(self.path, dtype=np.float32)

    def write_pairs(self, n):
        with open(self.path, "w") as f:
            for i in range(n):
                f.write(f"{i} {i % 3}\\n")

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return torch.from_numpy(self.pairs[i])


def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with accelerator.main_process_first():
        loader = DataLoader(Pairs("."), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.end_training()
''',
        ),
        Example(
            # the data set only reads: nothing to order
            before='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, path):
        self.pairs = np.loadtxt(path, dtype=np.float32)

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return torch.from_numpy(self.pairs[i])


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs("pairs.txt"), batch_size=4)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
''',
            after='''\
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from accelify.runtime import Accelerator


class Pairs(Dataset):
    def __init__(self, path):
        self.pairs = np.loadtxt(path, dtype=np.float32)

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return torch.from_numpy(self.pairs[i])


def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Pairs("pairs.txt"), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        done: set[int] = set()
        for site in ctx.facts.calls:
            cls = site.scope.class_scope
            if cls is None or id(cls) in done or not _writes(site) or not dataset_class(ctx.facts, cls):
                continue
            if not _built_by_init(ctx, site.scope, cls) or ctx.is_skipped(site.stmt) \
                    or ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope) is not None:
                continue
            done.add(id(cls))
            if not _first_at_constructions(ctx, site, cls):
                ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))


def _writes(site: CallSite) -> bool:
    """A call that writes a file (``open(p, "w")``, a writer, ``torch.save``, ``np.save``...)."""
    return writes_file(site) or (site.qualname or "") in _SAVES


def _built_by_init(ctx: Context, method: Scope, cls: Scope) -> bool:
    """Whether ``method`` is ``cls``'s ``__init__`` or a method that ``__init__`` calls (directly or through
    other methods of the class)."""
    seen: set[int] = set()
    pending = [method]
    while pending:
        scope = pending.pop()
        if scope.class_scope is cls and scope.name == "__init__":
            return True
        if id(scope) in seen:
            continue
        seen.add(id(scope))
        pending += [c.scope for c in ctx.plan.call_sites(scope) if c.scope.class_scope is cls]
    return False


def _first_at_constructions(ctx: Context, site: CallSite, cls: Scope) -> bool:
    """Each statement that builds ``cls`` (followed up through the helpers that call it) under
    ``main_process_first``; True when every one can go there, else nothing is changed."""
    def ready(scope: Scope, stmt: cst.BaseStatement) -> bool:
        return scope.class_scope is not cls and first_ready(ctx, scope, stmt)

    found = helper_calls(ctx.facts, ctx.plan, site, ready, Collectives(ctx.facts, ctx.plan, ctx.edits), depth=4)
    if found is None:
        return False
    first_at(ctx, found)
    ctx.change("build a data set that writes files on the main process first")
    return True
