"""Loaders the training reaches through a container or a wrapper (``analysis/loader_holders.py``): a dict of loaders
made before ``prepare`` is made again after it, a loader built inside ``cycle(...)``/``iter(...)`` is prepared where
it is built, and a holder that cannot be made again is refused naming it. Never a loader left unsharded in silence."""

from __future__ import annotations

import pytest
from _convert import assert_converts, converted

from accelify.pipeline import convert_source

LOOP = """\
for epoch in range(2):
    for phase in ["train", "valid"]:
        for x, y in loaders[phase]:
            loss = torch.nn.functional.mse_loss(model(x), y)
            if phase == "train":
                opt.zero_grad()
                loss.backward()
                opt.step()
"""


def test_a_dict_of_named_loaders_made_before_prepare_is_made_again_after_it() -> None:
    """brain-segmentation-pytorch's ``loaders = {"train": loader_train, "valid": loader_valid}`` before the model:
    prepare rebinds the names, not the dict, so every process walked all the data (and ACC022 said no DataLoader
    fed the loop)."""
    assert_converts(
        "import torch\n"
        "train = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
        "valid = torch.utils.data.DataLoader(vs, batch_size=2)\n"
        'loaders = {"train": train, "valid": valid}\n'
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n" + LOOP,
        "import torch\n"
        "from accelify.runtime import Accelerator\n"
        "accelerator = Accelerator()\n"
        "train = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
        "valid = torch.utils.data.DataLoader(vs, batch_size=2)\n"
        'loaders = {"train": train, "valid": valid}\n'
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, opt, train, valid = accelerator.prepare(model, opt, train, valid)\n"
        'loaders = {"train": train, "valid": valid}\n'
        + LOOP.replace("loss.backward()", "accelerator.backward(loss)") + "accelerator.end_training()\n",
    )


def test_a_dict_of_loaders_changed_before_prepare_is_refused_naming_it() -> None:
    result = convert_source(
        "import torch\n"
        "def fit(model, opt, loaders):\n"
        '    for x, y in loaders["train"]:\n'
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n"
        "        opt.step()\n"
        "train = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
        'loaders = {"train": train}\n'
        'loaders["again"] = train\n'
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "fit(model, opt, loaders)\n"
    )
    assert result.status == "attention", result.new
    assert [(w.code, w.line) for w in result.warnings] == [("ACC020", 3)]
    assert "walks `loaders` as it was before `accelerator.prepare`" in result.warnings[0].message


def test_the_transfer_learning_tutorials_dict_comprehension_of_loaders_is_prepared_where_it_is_built() -> None:
    out = converted(
        "import torch\n"
        'dataloaders = {x: torch.utils.data.DataLoader(sets[x], batch_size=4) for x in ["train", "valid"]}\n'
        "model = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n" + LOOP.replace("loaders[", "dataloaders[")
    )
    assert "dataloaders = {k: accelerator.prepare(v) for k, v in dataloaders.items()}\nmodel = " in out, out
    assert "model, opt = accelerator.prepare(model, opt)\n" in out, out


CYCLE = "def cycle(dl):\n    while True:\n        for batch in dl:\n            yield batch\n"
STEPS = ("model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
         "for it in range(8):\n    x, y = next(data)\n    torch.nn.functional.mse_loss(model(x), y).backward()\n"
         "    opt.step()\n")


@pytest.mark.parametrize("wrapper", ["cycle", "iter", "itertools.cycle"])
def test_a_loader_built_inside_a_wrapper_is_prepared_where_it_is_built(wrapper: str) -> None:
    """DDPM's ``train_loader = cycle(DataLoader(...))`` read with ``next``: only the test loader was prepared."""
    out = converted("import itertools\nimport torch\n" + CYCLE
                    + f"data = {wrapper}(torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True))\n" + STEPS)
    assert f"data = {wrapper}(accelerator.prepare(torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)))\n" in out, out
    assert "model, opt = accelerator.prepare(model, opt)\n" in out, out


def test_a_generator_of_a_named_loader_made_before_prepare_is_made_again_after_it() -> None:
    """A generator function takes nothing from the loader until it is drawn from: made again, it means the same."""
    out = converted("import torch\n" + CYCLE + "loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
                    + "data = cycle(loader)\n" + STEPS)
    assert "model, opt, loader = accelerator.prepare(model, opt, loader)\ndata = cycle(loader)\nfor it in" in out, out


@pytest.mark.parametrize("wrapper", ["iter", "itertools.cycle"])
def test_an_eager_wrapper_of_a_named_loader_made_before_prepare_is_refused_naming_it(wrapper: str) -> None:
    """``iter(loader)`` starts walking it (the shuffle draws its seed): made again after prepare, the one-process run
    would draw differently from the original, so it is refused rather than rebuilt."""
    result = convert_source("import itertools\nimport torch\n"
                            + "loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
                            + f"data = {wrapper}(loader)\n" + STEPS)
    assert result.status == "attention", result.new
    assert [w.code for w in result.warnings] == ["ACC020"]
    assert "walks `data` as it was before" in result.warnings[0].message


EPOCHS = ("model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
          "for epoch in range(2):\n{made}    for i, (x, y) in pbar:\n"
          "        torch.nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n")


def test_a_loop_over_a_progress_bar_of_a_listed_prepared_loader_is_sharded_and_not_warned() -> None:
    """jeffheaton's ``steps = list(enumerate(dataloader_train)); pbar = tqdm.tqdm(steps)`` in the epoch loop: it walks
    the prepared loader (ACC022 said no DataLoader fed it)."""
    result = convert_source("import torch\nimport tqdm\nloader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
                            + EPOCHS.format(made="    steps = list(enumerate(loader))\n    pbar = tqdm.tqdm(steps)\n"))
    assert result.status == "converted" and not result.warnings, result.warnings
    assert "model, opt, loader = accelerator.prepare(model, opt, loader)\n" in result.new


@pytest.mark.parametrize(("made", "outcome"), [("enumerate(loader)", "again"), ("tqdm.tqdm(loader)", "ACC020"),
                                               ("list(enumerate(loader))", "ACC020")])
def test_a_wrapped_loader_bound_before_prepare_is_made_again_or_refused(made: str, outcome: str) -> None:
    result = convert_source("import torch\nimport tqdm\nloader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
                            + f"pbar = {made}\n" + EPOCHS.format(made=""))
    if outcome == "again":
        assert f"model, opt, loader = accelerator.prepare(model, opt, loader)\npbar = {made}\nfor epoch" in result.new
    else:
        assert [w.code for w in result.warnings] == ["ACC020"], result.warnings
        assert "walks `pbar` as it was before" in result.warnings[0].message


def test_a_notebooks_two_experiments_each_walking_a_listed_loader_convert_without_a_refusal() -> None:
    """jeffheaton's notebook: the second experiment binds ``dataloader_train``, ``steps`` and ``pbar`` again and is
    prepared where it is built; the first experiment's ``steps = list(enumerate(...))`` comes after the main prepare
    (it was read as seeing the second experiment's prepare, not yet made: ACC020)."""
    experiment = ("loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True)\n"
                  "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                  "for epoch in range(2):\n    steps = list(enumerate(loader))\n    pbar = tqdm.tqdm(steps)\n"
                  "    for i, (x, y) in pbar:\n        torch.nn.functional.mse_loss(model(x), y).backward()\n"
                  "        opt.step()\n")
    result = convert_source("import torch\nimport tqdm\n" + experiment + experiment)
    assert result.status == "converted" and not result.warnings, result.warnings
    assert result.new.count("accelerator.prepare(") == 4, result.new


def test_a_loader_built_where_it_is_walked_is_prepared_there() -> None:
    """``for x, y in DataLoader(ds, ...)`` in the epoch loop, a generator that walks one it builds, and a helper
    that returns ``iter(DataLoader(...))``: each was left walking all the data on every process, with no warning."""
    out = converted(
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "def batches():\n    while True:\n        for batch in DataLoader(ds, batch_size=2, shuffle=True):\n"
        "            yield batch\n"
        "def make_iter():\n    return iter(DataLoader(ds, batch_size=2))\n"
        "data = batches()\nother = make_iter()\n"
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n    for x, y in DataLoader(ds, batch_size=2, shuffle=True):\n"
        "        x2, y2 = next(data)\n        x3, y3 = next(other)\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n        opt.step()\n"
    )
    assert "        for batch in accelerator.prepare(DataLoader(ds, batch_size=2, shuffle=True)):\n" in out, out
    assert "    return iter(accelerator.prepare(DataLoader(ds, batch_size=2)))\n" in out, out
    assert "    for x, y in accelerator.prepare(DataLoader(ds, batch_size=2, shuffle=True)):\n" in out, out
    assert out.count("accelerator.prepare(") == 4, out


def test_a_loader_a_helper_returns_as_it_is_is_prepared_once() -> None:
    out = converted(
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "def get_loader():\n    return DataLoader(ds, batch_size=2)\n"
        "loader = get_loader()\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n    torch.nn.functional.mse_loss(model(x), y).backward()\n    opt.step()\n"
    )
    assert out.count("accelerator.prepare(") == 1 and "model, opt, loader = accelerator.prepare(model, opt, loader)" in out, out


def test_a_loop_over_a_loader_built_in_place_is_not_told_that_no_loader_feeds_it() -> None:
    result = convert_source(
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in DataLoader(ds, batch_size=2, shuffle=True):\n"
        "    torch.nn.functional.mse_loss(model(x), y).backward()\n    opt.step()\n"
    )
    assert result.status == "converted" and not result.warnings, result.warnings
