"""``convert ENTRY -o OUT_DIR/`` writes a runnable copy of the program: every local module it imports, changed or not,
in its place relative to the folder its imports resolve from, packages with their folders and ``__init__.py``.

Two public projects were written wrong: pygcn's ``pygcn/train.py`` (``from pygcn.utils import load_data``) was written
flat (``OUT/utils.py``: the import fails), and cleanrl's ``cleanrl/dqn.py`` lost ``cleanrl_utils/`` beside ``cleanrl/``
(imported from the installed project's root, which the search did not look in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main

ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]  # this interpreter's, not PATH's

MODEL = "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
        "        self.fc = torch.nn.Linear(4, 1)\n\n    def forward(self, x):\n        return self.fc(x)\n"
DATA = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef make_loader():\n"
        "    torch.manual_seed(0)\n"
        "    return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4, shuffle=True)\n")
TRAIN = """\
import torch
{imports}

torch.manual_seed(0)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = make_loader()
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print("trained", len(loader))
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _written(out: Path) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for p in out.rglob("*.py"))


def _convert(*args: str) -> str:
    result = CliRunner().invoke(main, ["convert", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_an_installed_package_keeps_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pygcn's layout: ``pkg/train.py`` imports ``pkg.model`` (run as ``python -m pkg.train``, or installed)."""
    _write(tmp_path, {"setup.py": "", "pkg/__init__.py": "from .model import *\n", "pkg/model.py": MODEL,
                      "pkg/data.py": DATA,
                      "pkg/train.py": TRAIN.format(imports="from pkg.model import Net\nfrom pkg.data import make_loader")})
    monkeypatch.chdir(tmp_path)
    output = _convert("pkg/train.py", "-o", "out/")
    assert _written(tmp_path / "out") == ["pkg/__init__.py", "pkg/data.py", "pkg/model.py", "pkg/train.py"]
    assert "run it from out: python -m pkg.train (or accelify launch -m pkg.train)" in output
    assert (tmp_path / "out" / "pkg" / "__init__.py").read_text() == "from .model import *\n"
    assert "accelerator.prepare(" in (tmp_path / "out" / "pkg" / "train.py").read_text()


def test_a_script_in_a_subfolder_takes_the_helper_package_beside_its_folder(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """cleanrl's layout: ``algos/dqn.py`` (a plain folder) imports ``algos_utils`` from the project's root."""
    _write(tmp_path, {"pyproject.toml": "[project]\nname = 'algos'\n", "algos_utils/__init__.py": "",
                      "algos_utils/data.py": DATA, "algos_utils/nets/__init__.py": "", "algos_utils/nets/model.py": MODEL,
                      "algos/dqn.py": TRAIN.format(imports="from algos_utils.nets.model import Net\n"
                                                           "from algos_utils.data import make_loader"),
                      "algos/unrelated.py": "import torch\n"})
    monkeypatch.chdir(tmp_path)
    output = _convert("algos/dqn.py", "-o", "out/")
    assert "run it with out on the path (its imports start there): PYTHONPATH=out python out/algos/dqn.py" in output
    assert _written(tmp_path / "out") == ["algos/dqn.py", "algos_utils/__init__.py", "algos_utils/data.py",
                                          "algos_utils/nets/__init__.py", "algos_utils/nets/model.py"]


def test_a_program_beside_its_script_stays_flat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, {"model.py": MODEL, "data.py": DATA,
                      "train.py": TRAIN.format(imports="from model import Net\nfrom data import make_loader")})
    monkeypatch.chdir(tmp_path)
    assert "run it" not in _convert("train.py", "-o", "out/")
    assert _written(tmp_path / "out") == ["data.py", "model.py", "train.py"]


@pytest.mark.multiprocess
def test_the_written_copy_of_a_package_program_runs_on_two_processes(tmp_path: Path, clean_env) -> None:  # type: ignore[no-untyped-def]
    """An installed-style package whose entry imports a helper package beside it, written with -o and launched from the
    copy as ``python -m pkg.train`` on 2 CPU processes: each walks its half of the loader (4 of 8 batches)."""
    project = tmp_path / "project"
    _write(project, {"pyproject.toml": "", "pkg/__init__.py": "", "pkg/model.py": MODEL, "helpers/__init__.py": "",
                     "helpers/data.py": DATA,
                     "pkg/train.py": TRAIN.format(imports="from .model import Net\nfrom helpers.data import make_loader")})
    out = tmp_path / "out"
    proc = subprocess.run([*ACCELIFY, "convert", "pkg/train.py", "-o", f"{out}/"], cwd=project, capture_output=True,
                          text=True, timeout=120, env=clean_env(None))
    assert proc.returncode == 0, proc.stderr
    assert _written(out) == ["helpers/__init__.py", "helpers/data.py", "pkg/__init__.py", "pkg/model.py", "pkg/train.py"]
    proc = subprocess.run([*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", "-m", "pkg.train"], cwd=out,
                          capture_output=True, text=True, timeout=180, env=clean_env(None))
    assert proc.returncode == 0, proc.stderr
    assert "trained 4" in proc.stdout, proc.stdout
