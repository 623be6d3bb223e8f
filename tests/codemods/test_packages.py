"""Programs whose training lives in their own packages: relative imports are followed (``from .loops import fit``
in ``engine/__init__.py``), re-exports resolved, and the functions and classes found there converted with the
script; what stays out of the accelerator's reach is reported, never silently left."""

from __future__ import annotations

from pathlib import Path

from accelify.pipeline import convert_path

TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from engine import fit


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
    fit(model, optimizer, loader, epochs=2)


if __name__ == "__main__":
    main()
"""
LOOPS = """\
import torch
from .steps import step


def fit(model, optimizer, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = step(model, optimizer, x, y)
        print(f"epoch {epoch} last loss {loss:.4f}")
        torch.save(model.state_dict(), "model.pt")
"""
STEPS = """\
import torch


def step(model, optimizer, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_package_reached_by_relative_imports_is_converted_with_the_script(tmp_path: Path) -> None:
    _write(tmp_path, {"train.py": TRAIN, "engine/__init__.py": "from .loops import fit\n",
                      "engine/loops.py": LOOPS, "engine/steps.py": STEPS})
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted" and not result.warnings, result.warnings
    parts = {Path(c.path).relative_to(tmp_path).as_posix(): c.new for c in result.companions if c.changed}
    assert set(parts) == {"engine/loops.py", "engine/steps.py"}
    assert "def fit(model, optimizer, loader, epochs, accelerator):" in parts["engine/loops.py"]
    assert "accelerator.save(accelerator.unwrap_model(model).state_dict(), \"model.pt\")" in parts["engine/loops.py"]
    assert "    accelerator.backward(loss)\n" in parts["engine/steps.py"]
    assert "fit(model, optimizer, loader, epochs=2, accelerator=accelerator)" in result.new


TRAINER = """\
from base import BaseTrainer


class Trainer(BaseTrainer):
    def __init__(self, model, criterion, optimizer, data_loader, epochs):
        super().__init__(model, criterion, optimizer, epochs)
        self.data_loader = data_loader

    def _train_epoch(self, epoch):
        for data, target in self.data_loader:
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(data), target)
            loss.backward()
            self.optimizer.step()
        return loss.item()
"""
BASE = """\
import torch


class BaseTrainer:
    def __init__(self, model, criterion, optimizer, epochs):
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.epochs = epochs

    def train(self):
        for epoch in range(self.epochs):
            self._train_epoch(epoch)
            torch.save(self.model.state_dict(), "checkpoint.pt")
"""
RUN = TRAIN.replace("from engine import fit", "from trainer import Trainer").replace(
    "    fit(model, optimizer, loader, epochs=2)",
    "    trainer = Trainer(model, torch.nn.functional.mse_loss, optimizer, loader, epochs=2)\n    trainer.train()")


def test_a_template_projects_trainer_subclass_in_a_package_gets_the_accelerator(tmp_path: Path) -> None:
    """The loop of ``Trainer(BaseTrainer)`` (``trainer/``, re-exported by its ``__init__``) is converted, and so is the
    base class's epoch loop in another package: ``trainer.train()`` runs ``BaseTrainer.train``, whose
    ``self._train_epoch`` (not defined there) is the subclass's; its save goes through
    the accelerator, the model unwrapped (``super().__init__(model, ...)`` followed to the base's attributes)."""
    _write(tmp_path, {"train.py": RUN, "trainer/__init__.py": "from .trainer import Trainer\n",
                      "trainer/trainer.py": TRAINER, "base/__init__.py": "from .base_trainer import BaseTrainer\n",
                      "base/base_trainer.py": BASE})
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted"
    trainer = next(c.new for c in result.companions if c.path.endswith("trainer/trainer.py"))
    assert "            self.accelerator.backward(loss)\n" in trainer
    assert not [w for c in result.companions for w in c.warnings]
    base = next(c.new for c in result.companions if c.path.endswith("base/base_trainer.py"))
    assert "accelerator.save(accelerator.unwrap_model(self.model).state_dict(), \"checkpoint.pt\")" in base
    assert "trainer.train(accelerator)" in result.new


def test_an_imported_modules_own_main_block_does_not_decide_the_conversion(tmp_path: Path) -> None:
    """``name_dataset.py`` tests itself under ``if __name__ == "__main__":`` with a DataLoader of its own: imported by
    the training script, that block never runs, so it neither blocks the program (ACC014 before) nor is edited."""
    dataset = (
        "import torch\nfrom torch.utils.data import Dataset, DataLoader\n\n\n"
        "class Numbers(Dataset):\n    def __len__(self):\n        return 16\n\n"
        "    def __getitem__(self, i):\n        return torch.tensor([float(i)]), torch.tensor([2.0 * i])\n\n\n"
        "if __name__ == \"__main__\":\n    loader = DataLoader(Numbers(), batch_size=4)\n"
        "    for x, y in loader:\n        print(x, y)\n"
    )
    train = (
        "import torch\nfrom torch.utils.data import DataLoader\nfrom numbers_data import Numbers\n\n"
        "loader = DataLoader(Numbers(), batch_size=4, shuffle=True)\nmodel = torch.nn.Linear(1, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.001)\nfor x, y in loader:\n"
        "    loss = torch.nn.functional.mse_loss(model(x), y)\n    optimizer.zero_grad()\n    loss.backward()\n"
        "    optimizer.step()\n"
    )
    _write(tmp_path, {"train.py": train, "numbers_data.py": dataset})
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted" and not result.warnings, result.warnings
    assert not any(c.changed for c in result.companions)


def test_a_trainer_whose_loop_is_a_while_loop_out_of_reach_is_refused_naming_it(tmp_path: Path) -> None:
    """minGPT's layout: ``Trainer.run`` builds its optimizer and loader and trains in ``while True:``; what the script
    builds is not what trains, and the loop cannot get the accelerator: refused at the loop's backward, never a
    conversion that prepares the optimizer alone (or an internal error)."""
    trainer = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n\nclass Trainer:\n"
        "    def __init__(self, model, dataset, max_iters):\n        self.model = model\n"
        "        self.dataset = dataset\n        self.max_iters = max_iters\n\n    def run(self):\n"
        "        optimizer = self.model.configure_optimizers()\n"
        "        loader = DataLoader(self.dataset, batch_size=4, shuffle=True)\n        it = 0\n"
        "        while True:\n            for x, y in loader:\n"
        "                loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "                self.model.zero_grad()\n                loss.backward()\n                optimizer.step()\n"
        "                it += 1\n            if it >= self.max_iters:\n                break\n"
    )
    model = ("import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
             "        self.fc = torch.nn.Linear(2, 1)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
             "    def configure_optimizers(self):\n        return torch.optim.AdamW(self.parameters(), lr=1e-3)\n")
    script = ("import torch\nfrom torch.utils.data import TensorDataset\nfrom minilib.model import Net\n"
              "from minilib.trainer import Trainer\n\nif __name__ == \"__main__\":\n"
              "    trainer = Trainer(Net(), TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), max_iters=8)\n"
              "    trainer.run()\n")
    _write(tmp_path, {"chargpt.py": script, "minilib/__init__.py": "", "minilib/model.py": model,
                      "minilib/trainer.py": trainer})
    result = convert_path(tmp_path / "chargpt.py")
    assert result.status == "attention", (result.status, result.error, result.warnings)
    every = [w for part in (result, *result.companions) for w in part.warnings]
    assert any(w.code in ("ACC009", "ACC012") and w.path.endswith("minilib/trainer.py") for w in every), every


def test_a_solver_whose_init_reads_the_device_before_building_the_models_ties_it(tmp_path: Path) -> None:
    """stargan's ``Solver.__init__`` sets ``self.device`` and then calls ``self.build_model()``, which builds the
    model, optimizer and loader. Prepare goes into ``__init__`` right after that call (the builder runs once, there),
    so the accelerator is ``__init__``'s first statement and ``self.device = self.accelerator.device`` comes after it
    (it once went into ``build_model``, after the device line: AttributeError on every run, then ACC011)."""
    solver = (
        "import torch\nfrom torch.utils.data import DataLoader\n\n\nclass Solver:\n    def __init__(self, data):\n"
        "        self.data = data\n"
        "        self.device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\n        self.build_model()\n\n"
        "    def build_model(self):\n        self.net = torch.nn.Linear(2, 1)\n"
        "        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)\n        self.net.to(self.device)\n"
        "        self.loader = DataLoader(self.data, batch_size=4)\n\n"
        "    def train(self):\n        for x, y in self.loader:\n            x, y = x.to(self.device), y.to(self.device)\n"
        "            weight = torch.ones(1).to(self.device)\n"
        "            loss = torch.nn.functional.mse_loss(self.net(x), y) * weight.sum()\n            self.optimizer.zero_grad()\n"
        "            loss.backward()\n            self.optimizer.step()\n"
    )
    main = ("import torch\nfrom torch.utils.data import TensorDataset\nfrom solver import Solver\n\n"
            "solver = Solver(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)))\nsolver.train()\n")
    _write(tmp_path, {"main.py": main, "solver.py": solver})
    result = convert_path(tmp_path / "main.py")
    assert result.status == "converted", (result.reason, result.warnings)
    converted = next(c.new for c in result.companions if c.path.endswith("solver.py"))
    init = converted[converted.index("def __init__"):converted.index("def build_model")]
    lines = [line.strip() for line in init.splitlines()]
    assert lines.index("self.accelerator = Accelerator()") < lines.index("self.device = self.accelerator.device") \
        < lines.index("self.build_model()") < lines.index("self.net, self.optimizer, self.loader = self.accelerator.prepare(")
    assert "self.net.to(self.device)" not in converted
    assert [w.code for c in result.companions for w in c.warnings] == []


def test_a_loader_built_inline_where_it_is_passed_is_refused_as_a_named_one_is(tmp_path: Path) -> None:
    """stargan's ``Solver(celeba_loader, ...)`` with the loader written in the call (``Solver(DataLoader(...))``): the
    class builds the model and optimizer, the caller the loader, so nothing can prepare them together: ACC014, as for
    ``loader = DataLoader(...); Solver(loader)`` (it was "converted" with ACC021, every process on all the data)."""
    solver = ("import torch\n\n\nclass Solver:\n    def __init__(self, loader):\n        self.loader = loader\n"
              "        self.net = torch.nn.Linear(2, 1)\n"
              "        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)\n\n    def train(self):\n"
              "        for x, y in self.loader:\n            loss = torch.nn.functional.mse_loss(self.net(x), y)\n"
              "            self.optimizer.zero_grad()\n            loss.backward()\n            self.optimizer.step()\n")
    made = "DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)"
    for call in (f"Solver({made})", f"Solver(loader={made})"):
        main = f"import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom solver import Solver\n\n" \
               f"solver = {call}\nsolver.train()\n"
        _write(tmp_path, {"main.py": main, "solver.py": solver})
        result = convert_path(tmp_path / "main.py")
        assert (result.status, [w.code for w in result.warnings]) == ("attention", ["ACC014"]), (call, result.warnings)
        assert "`self.loader`" in result.reason


def test_a_config_module_that_makes_its_run_folder_with_exist_ok_false_is_reported(tmp_path: Path) -> None:
    """pytorch-template's ``ConfigParser`` makes ``saved/<timestamp>`` with ``mkdir(parents=True, exist_ok=run_id == '')``
    (False): on 2 processes the second one stops with FileExistsError. The author's ``exist_ok`` is kept, and the race
    reported (ACC018) where it is: in the config module."""
    config = ("from pathlib import Path\n\n\nclass Config:\n    def __init__(self, run_id=''):\n"
              "        self.save_dir = Path('saved') / (run_id or 'run')\n"
              "        self.save_dir.mkdir(parents=True, exist_ok=run_id == '')\n")
    main = TRAIN.replace("from engine import fit", "from config import Config").replace(
        "    fit(model, optimizer, loader, epochs=2)",
        "    config = Config('0101')\n    for x, y in loader:\n        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()")
    _write(tmp_path, {"train.py": main, "config.py": config})
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted"
    noted = [(Path(w.path).name, w.code, w.line) for c in result.companions for w in c.warnings]
    assert noted == [("config.py", "ACC018", 7)]
    assert all(not c.changed for c in result.companions)


def test_a_model_built_inline_where_a_trainer_receives_it_is_refused(tmp_path: Path) -> None:
    """``Trainer(torch.nn.Linear(2, 1), loader).fit()``: the trainer builds the optimizer and gets the loader, so both
    were prepared in its ``__init__``, but not the model written in the call: each process trained its own copy on
    its shard, no gradient averaged. Refused (ACC014 at the call), as with a list as data it stays converted."""
    trainer = ("import torch\n\n\nclass Trainer:\n    def __init__(self, model, loader):\n        self.model = model\n"
               "        self.loader = loader\n        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n\n"
               "    def fit(self):\n        for x, y in self.loader:\n"
               "            loss = torch.nn.functional.mse_loss(self.model(x), y)\n            self.optimizer.zero_grad()\n"
               "            loss.backward()\n            self.optimizer.step()\n")
    run = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom trainer import Trainer\n\n"
           "loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n"
           "Trainer(torch.nn.Linear(2, 1), loader).fit()\n")
    _write(tmp_path, {"run.py": run, "trainer.py": trainer})
    result = convert_path(tmp_path / "run.py")
    assert (result.status, [(w.code, w.line) for w in result.warnings]) == ("attention", [("ACC014", 6)])
    named = run.replace("Trainer(torch.nn.Linear(2, 1), loader)", "model = torch.nn.Linear(2, 1)\nTrainer(model, loader)")
    _write(tmp_path, {"run.py": named})
    converted = convert_path(tmp_path / "run.py")
    assert converted.status == "converted"
    assert "self.model, self.optimizer, self.loader = self.accelerator.prepare(" in converted.companions[0].new


def test_a_download_in_a_data_module_called_through_a_helper_runs_on_the_main_process_first(tmp_path: Path) -> None:
    """pytorch/examples super_resolution: ``train_set = get_training_set()`` (``from data import ...``) calls
    ``download_bsd300()``, which every process ran: they fetched into, extracted and deleted the same files at once.
    The call in the script runs on the main process first; nothing in ``data.py`` is gated in part."""
    data = ("import os\nimport shutil\nimport urllib.request\nimport torch\nfrom torch.utils.data import TensorDataset\n\n\n"
            "def download(dest='dataset'):\n    path = os.path.join(dest, 'images.tgz')\n"
            "    if not os.path.exists(path):\n"
            "        with urllib.request.urlopen('http://example.com/images.tgz') as r, open(path, 'wb') as f:\n"
            "            shutil.copyfileobj(r, f)\n        shutil.unpack_archive(path, dest)\n        os.remove(path)\n"
            "    return dest\n\n\ndef get_training_set():\n    root = download()\n"
            "    return TensorDataset(torch.randn(16, 2), torch.randn(16, 1))\n")
    main = TRAIN.replace("from engine import fit", "from data import get_training_set").replace(
        "    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)\n"
        "    fit(model, optimizer, loader, epochs=2)",
        "    loader = DataLoader(get_training_set(), batch_size=4)\n    for x, y in loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()")
    _write(tmp_path, {"train.py": main, "data.py": data})
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted"
    noted = [(Path(w.path).name, w.code, w.line) for c in result.companions for w in c.warnings]
    assert noted == [] and all(not c.changed for c in result.companions)
    assert "    with accelerator.main_process_first():\n        loader = DataLoader(get_training_set(), batch_size=4)\n" \
        in result.new


def test_an_empty_or_comment_only_init_of_an_imported_package_is_left_byte_for_byte(tmp_path: Path) -> None:
    # set I's I8 (W9): the package's empty ``__init__.py`` came out as ``pass`` with no newline
    _write(tmp_path, {"train.py": TRAIN, "engine/__init__.py": "", "engine/steps.py": STEPS,
                      "engine/loops.py": LOOPS, "helpers/__init__.py": "# helpers\n\n",
                      "helpers/names.py": "NAME = 'run'\n"})
    script = TRAIN.replace("from engine import fit", "from engine import loops\nfrom helpers import names").replace(
        "    fit(", "    loops.fit(")
    (tmp_path / "train.py").write_text(script)
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted", result.reason
    changed = {Path(c.path).relative_to(tmp_path).as_posix(): c.new for c in result.companions if c.changed}
    assert set(changed) == {"engine/loops.py", "engine/steps.py"}, changed
    for companion in result.companions:
        if companion.path.endswith("__init__.py"):
            assert companion.new == companion.old
