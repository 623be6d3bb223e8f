"""A trainer module converted alone (its class runs the loop on a model, optimizer or loader its caller builds) needs
attention naming the entry script to convert instead; converted from that entry, what the entry builds is prepared.

It was "converted" with ACC022: alone, the module prepared the optimizer it builds and left the model and the loader
that ``run.py`` builds, so every process would train its own unwrapped copy on all of the data."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.pipeline import convert_path

TRAINER = """\
import torch


class Trainer:
    def __init__(self, model, loader, lr=0.1):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.loader = loader

    def train(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
"""
RUN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from {module} import Trainer

model = torch.nn.Linear(4, 1)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
Trainer(model, loader).train(2)
"""
DRIVEN = TRAINER.replace("def __init__(self, model, loader, lr=0.1):", "def __init__(self, model, optimizer, loader):") \
    .replace("torch.optim.SGD(model.parameters(), lr=lr)", "optimizer")
MAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    Trainer(model, optimizer, loader).train(2)


if __name__ == "__main__":
    main()
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return _write(tmp_path, {"run.py": RUN.format(module="trainer"), "trainer.py": TRAINER})


def test_a_trainer_module_alone_needs_attention_naming_the_entry(project: Path) -> None:
    result = convert_path("trainer.py")
    assert result.status == "attention" and result.new == result.old and not result.companions
    assert result.reason == "convert run.py instead: it builds the model and loader that trainer.Trainer trains"
    assert all(w.fix == result.reason for w in result.warnings)
    cli = CliRunner().invoke(main, ["convert", "-i", "trainer.py"])
    assert cli.exit_code == 1, cli.output
    assert "convert run.py instead" in cli.output
    assert (project / "trainer.py").read_text() == TRAINER  # nothing written


def test_a_test_of_the_trainer_is_no_entry(project: Path) -> None:
    """``a_test.py`` builds a model and loader for the trainer too (as near, and first by name): it is not named."""
    (project / "a_test.py").write_text(RUN.format(module="trainer"))
    assert convert_path("trainer.py").reason.startswith("convert run.py instead")  # type: ignore[union-attr]


def test_a_trainer_of_objects_the_entry_builds_names_every_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train.py": MAIN, "trainer.py": DRIVEN})
    result = convert_path("trainer.py")
    assert result.status == "attention"
    assert result.reason == "convert train.py instead: it builds the model, optimizer and loader that trainer.Trainer trains"


def test_converted_from_the_entry_the_drivers_loader_is_prepared(project: Path) -> None:
    result = convert_path("run.py")
    assert result.status == "converted", result.warnings
    [companion] = result.companions
    assert Path(companion.path).name == "trainer.py"
    assert "self.model, self.optimizer, self.loader = self.accelerator.prepare(" in companion.new
    assert "self.accelerator.backward(loss)" in companion.new


def test_check_of_the_trainer_alone_checks_its_program(project: Path) -> None:
    """The pre-commit hook names only the staged module: the program it belongs to would change, so the check fails."""
    result = CliRunner().invoke(main, ["convert", "--check", "-q", "trainer.py"])
    assert result.exit_code == 1, result.output
    assert "would convert: run.py" in result.output and "would convert: trainer.py" in result.output


def test_migrate_converts_the_trainer_as_part_of_its_entrys_program(project: Path) -> None:
    result = CliRunner().invoke(main, ["migrate", ".", "--out", "out/"])
    assert result.exit_code == 0, result.output  # a module needing attention exits 1
    assert "self.accelerator.prepare(" in (project / "out" / "trainer.py").read_text()


def test_migrate_of_the_trainers_folder_alone_names_the_entry_outside_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": "", "run.py": RUN.format(module="lib.trainer"), "lib/trainer.py": TRAINER})
    result = CliRunner().invoke(main, ["migrate", "lib", "--out", "out/", "--report", "report.json"])
    assert result.exit_code == 1, result.output
    import json

    report = json.loads((tmp_path / "report.json").read_text())
    [row] = [r for r in report["files"] if r["path"].endswith("trainer.py")]
    assert row["status"] == "attention"
    assert row["reason"] == "convert run.py instead: it builds the model and loader that lib.trainer.Trainer trains"


def test_migrate_of_a_package_run_with_dash_m_is_one_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m pkg.train`` imports ``pkg.trainer`` from the package's root: migrate groups them (it converted the
    trainer alone too, and reported it needing attention while converting it with the entry)."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": "", "pkg/__init__.py": "", "pkg/trainer.py": TRAINER,
                      "pkg/train.py": RUN.format(module="pkg.trainer")})
    alone = convert_path("pkg/trainer.py")
    assert alone.reason == "convert pkg/train.py instead: it builds the model and loader that pkg.trainer.Trainer trains"
    result = CliRunner().invoke(main, ["migrate", ".", "--out", "out/"])
    assert result.exit_code == 0, result.output
    assert "self.accelerator.prepare(" in (tmp_path / "out" / "pkg" / "trainer.py").read_text()


def test_a_trainer_in_a_plain_folder_names_the_entry_above_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer/trainer.py`` (no ``__init__.py``, no project marker) under ``train.py``: the folder above is searched."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"train.py": RUN.format(module="trainer.trainer"), "trainer/trainer.py": TRAINER})
    result = convert_path("trainer/trainer.py")
    assert result.status == "attention"
    assert result.reason == "convert train.py instead: it builds the model and loader that trainer.trainer.Trainer trains"


def test_a_script_that_builds_its_own_training_is_converted_even_when_imported(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval.py`` imports ``train.py`` for its model class: train.py builds everything it trains, so it converts."""
    monkeypatch.chdir(tmp_path)
    train = MAIN.replace("from trainer import Trainer\n", "").replace(
        "    Trainer(model, optimizer, loader).train(2)\n",
        "    for x, y in loader:\n        optimizer.zero_grad()\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n")
    _write(tmp_path, {"train.py": train, "eval.py": "import torch\nfrom train import main\n\nmain()\n"})
    assert convert_path("train.py").status == "converted"


def test_a_script_whose_main_builds_its_training_stays_an_entry_when_a_sweep_imports_its_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep.py`` calls ``train.fit`` with objects of its own, but ``train.py``'s ``main()`` builds a whole training:
    converted alone, train.py is converted (it is not a module of sweep.py's program only)."""
    monkeypatch.chdir(tmp_path)
    train = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
             "def fit(model, optimizer, loader):\n    for x, y in loader:\n        optimizer.zero_grad()\n"
             "        torch.nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n\n\n"
             "def main():\n    model = torch.nn.Linear(4, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n"
             "    fit(model, optimizer, loader)\n\n\nif __name__ == \"__main__\":\n    main()\n")
    sweep = MAIN.replace("from trainer import Trainer", "from train import fit").replace(
        "Trainer(model, optimizer, loader).train(2)", "fit(model, optimizer, loader)")
    _write(tmp_path, {"train.py": train, "sweep.py": sweep})
    assert convert_path("train.py").status == "converted"


def test_check_of_a_trainer_whose_entry_is_above_its_folder_names_the_entry(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``lib/trainer.py`` (a plain folder) imported by ``run.py`` at the project's root: the pre-commit check of the
    staged module alone needs attention naming ``run.py``, exit 1."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": "", "run.py": RUN.format(module="lib.trainer"), "lib/trainer.py": TRAINER})
    result = CliRunner().invoke(main, ["convert", "--check", "lib/trainer.py"])
    assert result.exit_code == 1, result.output
    assert "lib/trainer.py: needs attention, not converted: convert run.py instead: it builds the model and loader " \
           "that lib.trainer.Trainer trains" in result.output


def test_migrate_follows_relative_imports_of_a_package_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pkg/train.py`` (``from .trainer import Trainer``, run as ``python -m pkg.train``) and ``pkg/trainer.py``
    (``from .losses import mse``): migrate's grouping reads both relative imports from the package (it read the
    entry's as a top-level module's and left ``trainer.py`` to be converted alone, needing attention)."""
    monkeypatch.chdir(tmp_path)
    trainer = TRAINER.replace("import torch\n", "import torch\n\nfrom .losses import mse\n", 1).replace(
        "torch.nn.functional.mse_loss(", "mse(")
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/losses.py": "import torch\n\n\ndef mse(a, b):\n"
                      "    return torch.nn.functional.mse_loss(a, b)\n", "pkg/trainer.py": trainer,
                      "pkg/train.py": RUN.format(module=".trainer")})
    from accelify.migrate.grouping import local_closure

    assert local_closure((tmp_path / "pkg" / "train.py").resolve(), {}) == {
        (tmp_path / "pkg" / name).resolve() for name in ("trainer.py", "losses.py")}
    result = CliRunner().invoke(main, ["migrate", ".", "--out", "out/"])
    assert result.exit_code == 0, result.output
    assert "self.accelerator.prepare(" in (tmp_path / "out" / "pkg" / "trainer.py").read_text()


def test_migrate_groups_a_helper_package_of_the_installed_project_with_its_script(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cleanrl's layout: ``algos/run.py`` imports ``algos_utils.trainer`` from the project's root (installed for
    development); migrate converts the trainer with its script, not alone."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"pyproject.toml": "", "algos_utils/__init__.py": "", "algos_utils/trainer.py": TRAINER,
                      "algos/run.py": RUN.format(module="algos_utils.trainer")})
    result = CliRunner().invoke(main, ["migrate", ".", "--out", "out/"])
    assert result.exit_code == 0, result.output
    assert "self.accelerator.prepare(" in (tmp_path / "out" / "algos_utils" / "trainer.py").read_text()


REGISTRY = """\
import os

path = os.path.dirname(os.path.abspath(__file__))
for py in [f[:-3] for f in os.listdir(path) if f.endswith(".py") and f != "__init__.py"]:
    mod = __import__(".".join([__name__, py]), fromlist=[py])
    globals().update({k: v for k, v in vars(mod).items() if isinstance(v, type)})
"""
BY_NAME_MAIN = """\
import sys

from agents import *


def main():
    agent = globals()[sys.argv[1]]()
    agent.run()


if __name__ == "__main__":
    main()
"""


def test_an_entry_that_loads_its_training_by_name_names_the_modules_to_convert(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A template project's ``main.py`` imports ``agents``, whose ``__init__`` imports every module of its folder by
    name: the entry imports no torch, and "does not import torch" alone left the user nowhere to go."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text(REGISTRY)
    (tmp_path / "agents" / "mnist.py").write_text(TRAINER.replace("class Trainer", "class MnistAgent"))
    (tmp_path / "agents" / "base.py").write_text("class BaseAgent:\n    pass\n")
    (tmp_path / "main.py").write_text(BY_NAME_MAIN)
    (tmp_path / "util.py").write_text("import os\n")
    monkeypatch.chdir(tmp_path)
    result = convert_path("main.py")
    assert result.status == "skipped"
    assert result.reason is not None and "agents/__init__.py imports the modules of its folder by name" in result.reason
    assert result.reason.endswith("convert the module that trains instead (agents/mnist.py)")  # base.py: no torch
    out = CliRunner().invoke(main, ["convert", "main.py"])
    assert "main.py: skipped: does not import torch: it loads its training by name" in out.stderr
    assert convert_path("util.py").reason == "does not import torch"  # no package that loads by name: as before
