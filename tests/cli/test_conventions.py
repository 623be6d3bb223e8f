"""Command-line conventions (ruff sets the bar): nothing to convert is not an error, quiet modes, one line per
repeated warning in migrate, NO_COLOR means no styling at all, and an --out that cannot be written is a one-line
error with exit code 2."""

from __future__ import annotations

import io
from pathlib import Path

from click.testing import CliRunner

from accelify import console as view
from accelify.cli import main

SCRIPT = """\
import torch
model = torch.nn.Linear(2, 1).cuda(1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x.cuda(1)), y.cuda(1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def _tree(root: Path, count: int = 3) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (root / f"train{i}.py").write_text(SCRIPT)
    return root


def test_a_folder_with_nothing_to_convert_says_so_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here\n")
    (tmp_path / "plain.py").write_text("print('no torch')\n")
    for command in ("convert", "migrate"):
        result = CliRunner().invoke(main, [command, str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert f"No Python files or notebooks that import torch found under {tmp_path}" in result.output


def test_quiet_check_names_the_files_that_would_change_and_nothing_else(tmp_path: Path) -> None:
    _tree(tmp_path, 1)
    result = CliRunner().invoke(main, ["convert", "-q", "--check", str(tmp_path / "train0.py")])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if not line.startswith(str(tmp_path / "train0.py") + ":")]
    assert lines == [f"would convert: {tmp_path / 'train0.py'}"]  # besides its warnings: no diff, no summary


def test_migrate_shows_a_warning_repeated_in_many_files_once_with_its_count(tmp_path: Path) -> None:
    _tree(tmp_path, 4)
    result = CliRunner().invoke(main, ["migrate", "-j", "1", str(tmp_path)])
    assert result.exit_code == 0, result.output
    grouped = [line for line in result.output.splitlines() if line.startswith("ACC013 ")]
    assert len(grouped) == 1 and "12 times in 4 files" in grouped[0] and "and 9 more" in grouped[0]
    assert "accelify migrate" in result.output  # the totals table
    quiet = CliRunner().invoke(main, ["migrate", "-q", "-j", "1", str(tmp_path)])
    assert quiet.exit_code == 0 and "accelify migrate" not in quiet.output and "ACC013" in quiet.output


def test_no_color_turns_off_bold_too(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    console = view.make_console(out)
    console.force_terminal = True  # type: ignore[misc]
    console.print(view.Text("attention", style="bold red"))
    assert "\x1b[" not in out.getvalue()


def test_an_out_folder_that_cannot_be_made_is_a_one_line_error(tmp_path: Path) -> None:
    _tree(tmp_path / "src", 1)
    (tmp_path / "a_file").write_text("in the way\n")
    result = CliRunner().invoke(main, ["migrate", str(tmp_path / "src"), "--out", str(tmp_path / "a_file" / "out")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "cannot write: Not a directory; the copy in --out is incomplete" in result.output


PROGRAM = {
    "train.py": """\
import torch
from model import Net
from data import make_loader
from utils.meters import report

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in make_loader():
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
report(loss.item())
""",
    "model.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.fc = torch.nn.Linear(2, 1)\n\n    def forward(self, x):\n        return self.fc(x)\n",
    "data.py": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef make_loader():\n"
               "    return DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)\n",
    "utils/__init__.py": "",
    "utils/meters.py": "def report(value):\n    print('loss', value)\n",
}


def _program(root: Path) -> Path:
    for name, text in PROGRAM.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_program_written_to_a_folder_is_runnable_there(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """-o OUT_DIR/ writes every local module the script imports, changed or not, in its place."""
    _program(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["convert", "train.py", "-o", "out/"])
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.py"))
    assert written == ["data.py", "model.py", "train.py", "utils/__init__.py", "utils/meters.py"]
    assert (tmp_path / "out" / "model.py").read_bytes() == (tmp_path / "model.py").read_bytes()


def test_checking_a_module_alone_checks_the_program_it_belongs_to(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A pre-commit hook names only the staged file: model.py alone must not pass while train.py would change."""
    _program(tmp_path)
    monkeypatch.chdir(tmp_path)
    for staged in ("model.py", "utils/meters.py"):
        result = CliRunner().invoke(main, ["convert", "--check", "-q", staged])
        assert result.exit_code == 1, result.output
        assert "would convert: train.py" in result.output


def test_a_script_in_a_subfolder_that_imports_the_roots_packages_is_written_runnable(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """explainingai-code DDPM-Pytorch's ``tools/train_ddpm.py`` imports ``dataset/``, ``models/`` from the root
    (run with the root on the path): -o OUT_DIR/ crashed with a traceback. ``tools/`` is a package, so the program
    is run from the root (``python -m tools.train``, or with the root on the path): the copy keeps that layout."""
    for name, text in PROGRAM.items():
        name = "tools/train.py" if name == "train.py" else name
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "tools" / "__init__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = CliRunner().invoke(main, ["convert", "tools/train.py", "-o", "out/"])
    assert result.exit_code == 0, result.output
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.py"))
    assert written == ["data.py", "model.py", "tools/__init__.py", "tools/train.py", "utils/__init__.py", "utils/meters.py"]
