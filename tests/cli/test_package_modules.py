"""A module of a package, given alone (a pre-commit hook names only the staged file; a user converts the file they are
looking at): its relative imports are followed from the package's root, it is checked with the program it belongs
to, and converted alone it needs attention naming the entry script, never "unchanged" with exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.migrate.grouping import entries_using, scan_imports
from accelify.pipeline import convert_path

TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from engine import fit

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
fit(model, optimizer, loader)
"""
LOOPS = "from .steps import step\n\n\ndef fit(model, optimizer, loader):\n    for x, y in loader:\n" \
        "        step(model, optimizer, x, y)\n"
STEPS = "import torch\n\n\ndef step(model, optimizer, x, y):\n    loss = torch.nn.functional.mse_loss(model(x), y)\n" \
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in {"train.py": TRAIN, "engine/__init__.py": "from .loops import fit\n", "engine/loops.py": LOOPS,
                       "engine/steps.py": STEPS}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_relative_imports_are_scanned_as_relative_names() -> None:
    assert scan_imports("from . import x\nfrom .a import b, c\nfrom ..p import q\nimport os\n") == \
        [".x", ".a", ".a.b", ".a.c", "..p", "..p.q", "os"]


def test_a_staged_package_module_is_checked_with_its_program(project: Path) -> None:
    """``engine/__init__.py`` reaches ``steps.py`` by ``from .loops import fit`` then ``from .steps import step``:
    staging ``engine/steps.py`` alone must not pass while ``train.py`` would change (it did: exit 0)."""
    assert entries_using(Path("engine/steps.py")) == [Path("train.py")]
    result = CliRunner().invoke(main, ["convert", "--check", "-q", "engine/steps.py"])
    assert result.exit_code == 1, result.output
    assert "would convert: train.py" in result.output and "would convert: engine/steps.py" in result.output


@pytest.mark.parametrize("module", ["engine/steps.py", "engine/loops.py"])
def test_a_package_module_converted_alone_needs_attention_naming_the_entry(project: Path, module: str) -> None:
    result = convert_path(module)
    assert result.status == "attention", (result.status, result.warnings)
    every = [w for part in (result, *result.companions) for w in part.warnings]
    assert [(Path(w.path).as_posix(), w.code) for w in every] == [("engine/steps.py", "ACC012")]
    assert every[0].fix.startswith("convert train.py instead")


def test_a_module_with_a_stray_backward_and_no_program_stays_unchanged(tmp_path: Path) -> None:
    """No script imports it: nothing to name, so it is left as it was (an autograd helper, not a training)."""
    (tmp_path / "grads.py").write_text("import torch\n\n\ndef grad_of(f, x):\n    y = f(x)\n    y.backward()\n"
                                       "    return x.grad\n")
    assert convert_path(tmp_path / "grads.py").status == "unchanged"


def test_a_script_in_a_folder_with_an_init_still_finds_the_modules_beside_it(tmp_path: Path) -> None:
    """``python examples/train.py`` puts ``examples/`` first on ``sys.path``: ``from data import get_loader`` is
    ``examples/data.py`` even though ``examples/__init__.py`` makes the folder a package."""
    data = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef get_loader():\n"
            "    return DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n")
    train = ("import torch\nfrom data import get_loader\n\nmodel = torch.nn.Linear(2, 1)\n"
             "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nloader = get_loader()\nfor x, y in loader:\n"
             "    loss = torch.nn.functional.mse_loss(model(x), y)\n    optimizer.zero_grad()\n    loss.backward()\n"
             "    optimizer.step()\n")
    for name, text in {"examples/__init__.py": "", "examples/data.py": data, "examples/train.py": train}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = convert_path(tmp_path / "examples" / "train.py")
    assert result.status == "converted" and not result.warnings, result.warnings
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in result.new
    # staged alone, examples/data.py is checked with the script beside it (only the package's root was searched)
    assert entries_using(tmp_path / "examples" / "data.py") == [tmp_path / "examples" / "train.py"]


def test_a_script_with_a_main_block_that_a_notebook_imports_is_previewed_as_itself(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """tanelp/tiny-diffusion (set G): ``vis.ipynb`` imports ``ddpm`` for its classes, and ``ddpm.py`` trains in its
    own ``__main__`` block. ``convert ddpm.py`` previewed "0 files would be converted, 1 unchanged" (and ``--check``
    passed) while ``--in-place`` and ``-o`` converted it: the preview read it as the notebook's module."""
    script = TRAIN.replace("from engine import fit\n", "").replace(
        "fit(model, optimizer, loader)\n",
        "\n\nif __name__ == \"__main__\":\n    for x, y in loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n")
    (tmp_path / "ddpm.py").write_text(script)
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["import torch\n", "import ddpm\n", "print(ddpm.model)\n"]}
    (tmp_path / "vis.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.chdir(tmp_path)
    assert entries_using(Path("ddpm.py")) == [Path("vis.ipynb")]
    result = CliRunner().invoke(main, ["convert", "--check", "-q", "ddpm.py"])
    assert result.exit_code == 1 and "would convert: ddpm.py" in result.output, result.output


def test_a_loader_held_by_a_helper_object_of_another_package_is_prepared_on_its_attribute(tmp_path: Path) -> None:
    """moemen95's template: ``self.data_loader = MnistDataLoader(config)`` (``datasets/mnist.py``) sets
    ``self.train_loader``, walked as ``self.data_loader.train_loader`` by ``agents/mnist.py``; the repository root
    holds a stray ``__init__.py``. Refused before with ACC021's fix (build it in a local module), which it already was."""
    helper = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass Loaders:\n"
              "    def __init__(self, config):\n"
              "        self.train_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n")
    agent = ("import torch\nfrom datasets.mnist import Loaders\n\n\nclass Agent:\n    def __init__(self, config):\n"
             "        self.model = torch.nn.Linear(2, 1)\n        self.data_loader = Loaders(config)\n"
             "        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)\n\n"
             "    def train(self):\n        for x, y in self.data_loader.train_loader:\n"
             "            torch.nn.functional.mse_loss(self.model(x), y).backward()\n            self.optimizer.step()\n")
    for name, text in {"__init__.py": "", "datasets/__init__.py": "", "datasets/mnist.py": helper,
                       "agents/__init__.py": "", "agents/mnist.py": agent}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = convert_path(tmp_path / "agents" / "mnist.py")
    assert result.status == "converted", result.warnings
    assert ("self.model, self.optimizer, self.data_loader.train_loader = self.accelerator.prepare(\n"
            "            self.model, self.optimizer, self.data_loader.train_loader\n        )\n") in result.new, result.new


SCRIPTS_TRAIN = """\
import torch
from src.engine import fit
import json

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
fit(model, optimizer, loader)
"""

ENGINE = """\
import torch


def fit(model, optimizer, loader):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_script_in_scripts_finds_the_module_its_repository_root_holds(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``scripts/train.py`` imports ``src.engine``, which runs from the repository's root (``python -m``,
    ``PYTHONPATH=.``): the loop there was not seen, so the conversion prepared what the script builds and left the
    loop's backward as it was (an RL agent whose actor and critic train outside its forward was "converted")."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "scripts" / "train.py").write_text(SCRIPTS_TRAIN)
    (tmp_path / "src" / "engine.py").write_text(ENGINE)
    (tmp_path / "json.py").write_text("raise RuntimeError('an installed module is never looked for above')\n")
    monkeypatch.chdir(tmp_path / "scripts")
    result = convert_path("train.py")
    assert result.status == "converted", result.reason
    monkeypatch.syspath_prepend(str(tmp_path))  # ``PYTHONPATH=.`` from the root, as the program itself runs
    assert [c.path for c in convert_path("train.py").companions] == [str(Path("..") / "src" / "engine.py")]
    assert [c.path for c in result.companions] == [str(Path("..") / "src" / "engine.py")]
    assert "accelerator.backward(loss)" in result.companions[0].new
    out = CliRunner().invoke(main, ["convert", "train.py", "-o", str(tmp_path / "out") + "/"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "out" / "src" / "engine.py").is_file() and (tmp_path / "out" / "scripts" / "train.py").is_file()
    assert not (tmp_path / "out" / "json.py").exists()


def test_a_script_whose_imported_module_trains_with_no_optimizer_found_needs_attention(tmp_path: Path) -> None:
    """Set M5: the entry builds its model and optimizer by name (``layers[config["model"]](...)``) and a module it
    imports makes the step; the refusal (ACC012) was in that module, and the script was "unchanged", exit 0 (``--check``
    passed over it)."""
    (tmp_path / "engines.py").write_text(
        "def create_trainer(model, optimizer, loss_fn):\n    def _update(batch):\n        x, y = batch\n"
        "        loss = loss_fn(model(x), y)\n        loss.backward()\n        optimizer.step()\n"
        "        optimizer.zero_grad()\n        return loss.item()\n\n    return _update\n")
    (tmp_path / "train.py").write_text(
        "import importlib\nimport inspect\n\nimport torch\n\nfrom engines import create_trainer\n\n"
        "if __name__ == '__main__':\n"
        "    optimizers = dict(inspect.getmembers(importlib.import_module('torch.optim'), inspect.isclass))\n"
        "    layers = dict(inspect.getmembers(torch.nn, inspect.isclass))\n    model = layers['Linear'](2, 1)\n"
        "    optimizer = optimizers['Adam'](model.parameters(), lr=0.1)\n"
        "    step = create_trainer(model, optimizer, torch.nn.MSELoss())\n"
        "    for batch in [(torch.ones(4, 2), torch.ones(4, 1))]:\n        step(batch)\n")
    result = convert_path(tmp_path / "train.py")
    every = [(Path(w.path).as_posix(), w.code) for part in (result, *result.companions) for w in part.warnings]
    assert [(Path(path).name, code) for path, code in every] == [("engines.py", "ACC012")]
    assert result.status == "attention", (result.status, every)
