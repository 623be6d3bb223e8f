"""Loaders stored into a dict's items after ``{}`` made it (``analysis/filled_dicts.py``, issue 23, K10): where every
item the program stores is known, the items are prepared in the one prepare call where the dict is in hand before it,
else in place after the last one is stored, and the loops over them train sharded; where it is not, nothing is prepared
and ACC053 says why."""

from __future__ import annotations

import pytest
from _convert import assert_converts, codes, converted, dedent

from accelify.pipeline import convert_source

MODEL = """\
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""

WALK = """\
for epoch in range(2):
    for x, y in loaders["train"]:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


def test_items_stored_under_string_keys_in_a_notebook_are_prepared_with_the_model() -> None:
    """K10's cells: ``loaders = {}``, ``loaders['train'] = ...``, ``loaders['valid'] = ...`` (single quotes kept) before
    the model: the items join the one prepare call, where a named loader would be prepared."""
    assert_converts(
        "import torch\n"
        "loaders = {}\n"
        "loaders['train'] = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
        "loaders['valid'] = torch.utils.data.DataLoader(vs, batch_size=2)\n"
        "print(len(loaders['train']))\n" + MODEL + WALK,
        "import torch\n"
        "from accelify.runtime import Accelerator\n"
        "accelerator = Accelerator()\n"
        "loaders = {}\n"
        "loaders['train'] = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
        "loaders['valid'] = torch.utils.data.DataLoader(vs, batch_size=2)\n"
        "accelerator.print(len(loaders['train']))\n"
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, opt, loaders['train'], loaders['valid'] = accelerator.prepare(\n"
        "    model, opt, loaders['train'], loaders['valid']\n"
        ")\n"
        "for epoch in range(2):\n"
        '    for x, y in loaders["train"]:\n'
        "        opt.zero_grad()\n"
        "        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))\n"
        "        opt.step()\n"
        "accelerator.end_training()\n",
    )


def test_a_scheduler_sized_by_an_item_reads_the_original_length() -> None:
    """``OneCycleLR(total_steps=epochs * len(loaders["train"]))`` stepped per batch: prepared with the scheduler, after
    it, the item's length there is the original's (prepared first, the schedule would be N times too short)."""
    new = converted(
        "import torch\n"
        "loaders = {}\n"
        'loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n' + MODEL +
        'sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=2 * len(loaders["train"]))\n'
        + WALK + "        sched.step()\n")
    joined = 'model, opt, loaders["train"], sched = accelerator.prepare(\n    model, opt, loaders["train"], sched\n)\n'
    assert joined in new and new.index("sched = torch.optim") < new.index(joined), new


def test_items_stored_by_a_loop_over_literal_keys_after_prepare_are_prepared_after_the_loop() -> None:
    """The transfer-learning layout: ``dataloaders = dict()`` then ``dataloaders[phase] = DataLoader(...)`` for each
    phase of a literal list, after the model and optimizer are prepared; walked as ``dataloaders[phase]``."""
    assert_converts(
        "import torch\n" + MODEL +
        "dataloaders = dict()\n"
        'for phase in ("train", "val"):\n'
        "    dataloaders[phase] = torch.utils.data.DataLoader(sets[phase], batch_size=2)\n"
        'for phase in ["train", "val"]:\n'
        "    for x, y in dataloaders[phase]:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        '        if phase == "train":\n'
        "            loss.backward()\n"
        "            opt.step()\n",
        "import torch\n"
        "from accelify.runtime import Accelerator\n"
        "accelerator = Accelerator()\n"
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, opt = accelerator.prepare(model, opt)\n"
        "dataloaders = dict()\n"
        'for phase in ("train", "val"):\n'
        "    dataloaders[phase] = torch.utils.data.DataLoader(sets[phase], batch_size=2)\n"
        'dataloaders["train"], dataloaders["val"] = accelerator.prepare(\n'
        '    dataloaders["train"], dataloaders["val"]\n'
        ")\n"
        'for phase in ["train", "val"]:\n'
        "    for x, y in dataloaders[phase]:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        '        if phase == "train":\n'
        "            accelerator.backward(loss)\n"
        "            opt.step()\n"
        "accelerator.end_training()\n",
    )


def test_an_evaluation_over_a_prepared_item_is_gathered_and_its_average_reduced() -> None:
    """What a named prepared loader gets: the validation outputs gathered, the training sum reduced before it is
    divided by the data set's length."""
    new = converted(
        "import torch\n"
        "loaders = {}\n"
        'loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n'
        'loaders["valid"] = torch.utils.data.DataLoader(vs, batch_size=2)\n' + MODEL + dedent("""
        for epoch in range(2):
            total = 0.0
            for x, y in loaders["train"]:
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                total += loss.item() * x.size(0)
            print(total / len(loaders["train"].dataset))
            correct = 0
            with torch.no_grad():
                for x, y in loaders["valid"]:
                    correct += (model(x).round() == y).sum().item()
            print(correct / len(loaders["valid"].dataset))
        """))
    assert 'total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()\n' in new
    assert "gather_for_metrics" in new or 'correct = accelerator.reduce(' in new, new


UNKNOWN = {
    "computed key": (
        "loaders = {}\n"
        "for name in names:\n"
        "    loaders[name] = torch.utils.data.DataLoader(sets[name], batch_size=2)\n"
    ),
    "filled by the function it is passed to": (
        "def fill(loaders):\n"
        '    loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=2)\n'
        "loaders = {}\n"
        "fill(loaders)\n"
    ),
    "stored again after it is read": (
        "loaders = {}\n"
        'loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=2)\n'
        'first = next(iter(loaders["train"]))\n'
        'loaders["train"] = torch.utils.data.DataLoader(ds2, batch_size=2)\n'
    ),
    "stored under a condition": (
        "loaders = {}\n"
        "if big:\n"
        '    loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=8)\n'
        "else:\n"
        '    loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=2)\n'
    ),
}


@pytest.mark.parametrize("shape", sorted(UNKNOWN))
def test_items_the_plan_cannot_know_stay_unprepared_and_acc053_says_so(shape: str) -> None:
    source = "import torch\n" + UNKNOWN[shape] + MODEL + WALK
    new = converted(source)
    assert "accelerator.prepare(loaders" not in new and 'loaders["train"] = accelerator' not in new, new
    line = source.splitlines().index('    for x, y in loaders["train"]:') + 1
    assert f"ACC053:{line}" in codes(source), codes(source)


HELPER_MAIN = """\
import argparse
import torch


def make_loaders(batch_size):
{body}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    device = torch.device("cpu" if args.cpu else "cuda")
    loaders = make_loaders(4)
    model = torch.nn.Linear(2, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loaders["train"]:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
"""

CONVERTED_MAIN = """\
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=args.cpu)
    loaders = make_loaders(4)
{prepare}
    for epoch in range(2):
        for x, y in loaders["train"]:
            opt.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            opt.step()
    accelerator.end_training()
"""

FILLED = (
    "    loaders = {}\n"
    '    loaders["train"] = torch.utils.data.DataLoader(ds, batch_size=batch_size)\n'
    '    loaders["valid"] = torch.utils.data.DataLoader(vs, batch_size=batch_size)\n'
    "    return loaders"
)
LITERAL = (
    '    loaders = {"train": torch.utils.data.DataLoader(ds, batch_size=batch_size)}\n'
    "    return loaders"
)


@pytest.mark.parametrize("body, prepare", [
    (FILLED, "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             '    model, opt, loaders["train"], loaders["valid"] = accelerator.prepare(\n'
             '        model, opt, loaders["train"], loaders["valid"]\n    )'),
    (LITERAL, "    loaders = {k: accelerator.prepare(v) for k, v in loaders.items()}\n    model = torch.nn.Linear(2, 1)\n"
              "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    model, opt = accelerator.prepare(model, opt)"),
], ids=["filled", "literal"])
def test_a_helper_without_the_accelerator_has_its_loaders_prepared_where_main_receives_them(body: str, prepare: str) -> None:
    """The accelerator is made in ``main`` (it needs ``args.cpu``), the dict in a helper that never sees it: the items
    are prepared in ``main``, with the model (filled item by item) or right after ``loaders = make_loaders(4)`` (one
    literal) (before: left unprepared, in silence)."""
    before = HELPER_MAIN.format(body=body)
    after = before.replace("import torch\n", "import torch\nfrom accelify.runtime import Accelerator\n", 1)
    after = after[:after.index("def main():")] + CONVERTED_MAIN.format(prepare=prepare)
    assert_converts(before, after)


@pytest.mark.parametrize("made", [
    'loaders = {}\nloaders["train"] = torch.utils.data.DataLoader(ds, batch_size=4)\n',
    'loaders = {"train": torch.utils.data.DataLoader(ds, batch_size=4)}\n',
], ids=["filled", "literal"])
def test_a_module_dict_walked_by_a_main_that_makes_the_accelerator_is_refused(made: str) -> None:
    """The dict is a module global, the accelerator is made in ``main`` (it needs ``args.cpu``): no statement that
    has the accelerator can prepare the items, so the file is refused (ACC020) rather than left unsharded in silence."""
    source = "import argparse\nimport torch\n" + made + HELPER_MAIN[HELPER_MAIN.index("def main():"):].replace(
        "    loaders = make_loaders(4)\n", "")
    result = convert_source(dedent(source))
    assert result.status == "attention" and [w.code for w in result.warnings] == ["ACC020"], result.warnings
