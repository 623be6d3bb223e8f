"""``from module import *`` of the program's own modules: the names resolve as if imported by name (``__all__``
respected, a star import inside the module followed, the importing module's own definitions first), and an entry
that imports torch only through its own modules is a program, never "does not import torch"."""

from __future__ import annotations

from pathlib import Path

from accelify.pipeline import convert_path

DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_data(batch_size):
    return DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=batch_size)
"""
TRAIN = """\
import torch
from {module} import *

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = get_data(4)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
PREPARED = "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "train.py"


def test_a_star_import_resolves_like_an_import_by_name(tmp_path: Path) -> None:
    result = convert_path(_write(tmp_path, {"train.py": TRAIN.format(module="data"), "data.py": DATA}))
    assert result.status == "converted" and not result.warnings, result.warnings
    assert PREPARED in result.new


def test_a_star_import_reexported_by_a_package_and_by_another_module(tmp_path: Path) -> None:
    """``from helpers import *`` where ``helpers/__init__.py`` says ``from .loaders import *`` and ``loaders`` in turn
    ``from .data import *``: the name is found two star imports away."""
    result = convert_path(_write(tmp_path, {
        "train.py": TRAIN.format(module="helpers"), "helpers/__init__.py": "from .loaders import *\n",
        "helpers/loaders.py": "from .data import *\n", "helpers/data.py": DATA}))
    assert result.status == "converted" and not result.warnings, result.warnings
    assert PREPARED in result.new


def test_all_limits_what_a_star_import_binds(tmp_path: Path) -> None:
    """A name left out of ``__all__`` is not imported by ``*``: the loader is not followed there, and said so."""
    data = DATA + '\n__all__ = ["torch"]\n'
    result = convert_path(_write(tmp_path, {"train.py": TRAIN.format(module="data"), "data.py": data}))
    assert PREPARED not in result.new
    assert [w.code for w in result.warnings] == ["ACC021"]


def test_the_modules_own_definition_wins_over_a_star_imported_one(tmp_path: Path) -> None:
    """``def get_data`` after ``from data import *`` is the script's own: its loader is followed there."""
    own = TRAIN.format(module="data").replace(
        "model = torch.nn.Linear", "def get_data(batch_size):\n    return torch.utils.data.DataLoader("
        "torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=batch_size)\n\n\n"
        "model = torch.nn.Linear")
    result = convert_path(_write(tmp_path, {"train.py": own, "data.py": "import torch\n\n\ndef get_data(n):\n"
                                            "    return [(torch.randn(n, 2), torch.randn(n, 1))]\n"}))
    assert result.status == "converted" and not result.warnings, result.warnings
    assert PREPARED in result.new


def test_a_loader_a_module_builds_when_imported_is_prepared_where_the_script_trains(tmp_path: Path) -> None:
    """``valid_iter`` made at import time by ``data.py`` (``from data import valid_iter`` or ``*``): prepared with
    the rest, and the accelerator created after the imports (never before the import of ``Accelerator``)."""
    data = DATA + "\n\ntrain_iter = get_data(4)\n"
    for spelled in ("from data import *", "from data import train_iter"):
        train = TRAIN.format(module="data").replace("from data import *", spelled).replace(
            "loader = get_data(4)\nfor x, y in loader:", "for x, y in train_iter:")
        result = convert_path(_write(tmp_path, {"train.py": train, "data.py": data}))
        assert result.status == "converted" and not result.warnings, (spelled, result.warnings)
        assert "model, optimizer, train_iter = accelerator.prepare(model, optimizer, train_iter)" in result.new
        lines = result.new.splitlines()
        assert lines.index("from accelify.runtime import Accelerator") < lines.index("accelerator = Accelerator(cpu=True)")


def test_an_entry_that_imports_torch_only_through_its_packages_is_a_program(tmp_path: Path) -> None:
    """pytorch-wgan's ``main.py`` imports only ``models.*`` and ``utils.*``: it was skipped ("does not import
    torch") though its model class trains; now the program is converted or refused, never skipped."""
    gan = ("import torch\n\n\nclass GAN:\n    def __init__(self):\n        self.net = torch.nn.Linear(2, 1)\n"
           "        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)\n\n"
           "    def train(self, loader):\n        for x, y in loader:\n"
           "            loss = torch.nn.functional.mse_loss(self.net(x), y)\n            self.optimizer.zero_grad()\n"
           "            loss.backward()\n            self.optimizer.step()\n")
    main = "from models.gan import GAN\nfrom utils.data_loader import get_data\n\nloader = get_data(4)\nmodel = GAN()\n" \
           "model.train(loader)\n"
    result = convert_path(_write(tmp_path, {"train.py": main, "models/gan.py": gan, "utils/data_loader.py": DATA}))
    # the model class builds its optimizer, the script its loader, and ``train(self, loader)`` (called once) holds
    # both: prepared first thing there, the accelerator made in ``__init__``
    assert (result.status, [w.code for w in result.warnings]) == ("converted", []), result.warnings
    gan_out = next(c.new for c in result.companions if c.path.endswith("gan.py"))
    assert "    def train(self, loader):\n        self.net, self.optimizer, loader = self.accelerator.prepare(" in gan_out
    plain = _write(tmp_path / "plain", {"train.py": "import json\nfrom helpers import load\n",
                                        "helpers.py": "import json\n\n\ndef load():\n    return 1\n"})
    assert convert_path(plain).status == "skipped"  # no torch anywhere: still skipped
