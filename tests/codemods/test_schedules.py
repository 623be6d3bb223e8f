"""``analysis/schedules.per_batch``: how often each shape of training steps its scheduler."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accelify.codemods.analysis.collect import collect
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.schedules import per_batch

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
"""

SHAPES = {
    "in the batch loop": (True, """
        for epoch in range(2):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
                if epoch > 0:
                    scheduler.step()
        """),
    "a while loop on a step counter": (True, """
        batches, step = iter(loader), 0
        while step < 2:
            x, y = next(batches)
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
            step += 1
        """),
    "a step helper called from the batch loop": (True, """
        def training_step(x):
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
        for x, y in loader:
            training_step(x)
        """),
    "after the batch loop": (False, """
        for epoch in range(2):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
            scheduler.step()
        """),
    "after a training helper": (False, """
        def train(model, loader, optimizer):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
        for epoch in range(2):
            train(model, loader, optimizer)
            scheduler.step(0.5)
        """),
    "the last line of train_one_epoch": (False, """
        def train_one_epoch(model, loader, optimizer, scheduler):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
            scheduler.step()
        for epoch in range(2):
            train_one_epoch(model, loader, optimizer, scheduler)
        """),
    "an epoch-end hook": (False, """
        def on_epoch_end():
            scheduler.step()
        for epoch in range(2):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
            on_epoch_end()
        """),
    "both": (None, """
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
        for epoch in range(2):
            scheduler.step()
        """),
    "per epoch after a resume's catch-up loop": (False, """
        def fit(loader, model, optimizer, scheduler, n_epochs, start_epoch=0):
            for epoch in range(0, start_epoch):
                scheduler.step()
            for epoch in range(start_epoch, n_epochs):
                scheduler.step()
                for x, y in loader:
                    model(x).sum().backward()
                    optimizer.step()
        fit(loader, model, optimizer, scheduler, 2)
        """),
    "per epoch after a module-level catch-up loop": (False, """
        start_epoch = 1
        for _ in range(start_epoch):
            print("skipping an epoch")
            scheduler.step()
        for epoch in range(start_epoch, 3):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
            scheduler.step()
        """),
    "per batch after a catch-up loop": (True, """
        start_step = 3
        for _ in range(start_step):
            scheduler.step()
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
        """),
    "a loop stepping it beside a call of the program's own is no catch-up": (None, """
        def train(model, loader, optimizer):
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
        for epoch in range(2):
            train(model, loader, optimizer)
            scheduler.step()
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
        """),
    "a warm-up loop of its own": (None, """
        for _ in range(3):
            scheduler.step()
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
        """),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_per_batch(name: str) -> None:
    expected, body = SHAPES[name]
    plan = Plan(collect(cst.parse_module(HEAD + textwrap.dedent(body).lstrip("\n"))))
    scheduler = next(b for b in plan.facts.bindings() if b.key == "scheduler")
    assert per_batch(plan, scheduler) is expected
    assert (scheduler in plan.objects) is (expected is not False)


BRANCHES = """\
import sys
import torch
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
if len(sys.argv) > 1:
    scheduler = MultiStepLR(optimizer, milestones=[80, 120], gamma=0.1)
else:
    scheduler = MultiStepLR(optimizer, milestones=[60, 120, 160], gamma=0.2)
for epoch in range(2):
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()
{step}
"""


@pytest.mark.parametrize("step, expected", [("    scheduler.step()", False), ("        scheduler.step()", True)])
def test_per_batch_of_a_name_bound_in_branches(step: str, expected: bool) -> None:
    """A scheduler bound in both branches of an ``if``/``else`` (the ``--dataset`` switch, uoguelph-mlrg/Cutout):
    every binding is stepped where the one step call is, so stepped per epoch neither is prepared."""
    plan = Plan(collect(cst.parse_module(BRANCHES.format(step=step))))
    schedulers = [b for b in plan.facts.bindings() if b.key == "scheduler"]
    assert len(schedulers) == 2
    for scheduler in schedulers:
        assert per_batch(plan, scheduler) is expected
        assert (scheduler in plan.objects) is expected
