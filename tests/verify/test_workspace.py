"""The files a verification converts: the script with the modules it imports, never the rest of its folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from verification_pool import VerificationPool

from accelify.pipeline import convert_source
from accelify.verify.workspace import ScriptFiles, convert_files

SCRIPT = """\
import torch
from helpers import make_model
model = make_model()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    opt.step()
"""
HELPERS = "import torch\n\n\ndef make_model():\n    return torch.nn.Linear(2, 1)\n"
# Another script of the same folder, with names of its own: analysed with train.py it would change its plan.
OTHER = """\
import torch
optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(range(4))
"""


def test_only_imported_modules_are_converted_with_the_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "other_experiment.py").write_text(OTHER)
    files = ScriptFiles.from_path(tmp_path / "train.py")
    assert {name for name, _ in files.modules} == {"helpers.py", "other_experiment.py"}  # all travel to the run
    converted, result = convert_files(files)
    alone = convert_source(SCRIPT, path=str(tmp_path / "train.py"))
    assert result.status == alone.status == "converted"
    assert converted.source == alone.new
    assert dict(converted.modules)["other_experiment.py"] == OTHER


# A script as examples are written: data next to it and one folder up, a checkpoint folder that already holds a file
# from the user's last run, and a log it appends to.
READS_AND_WRITES = """\
import os
import torch
from torch.utils.data import DataLoader, TensorDataset

rows = [list(map(float, line.split(","))) for line in open("../data/train.csv")]
scale = float(open("data/scale.txt").read())
data = torch.tensor(rows)
loader = DataLoader(TensorDataset(data[:, :2] * scale, data[:, 2:]), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
os.makedirs("runs/latest", exist_ok=True)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    with open("runs/train.log", "a") as log:
        log.write(f"{loss.item():.6f}\\n")
torch.save(model.state_dict(), "checkpoints/model.pt")
with open("data/scale.txt", "w") as again:
    again.write("overwritten\\n")
print("done", loss.item())
"""


def _project(tmp_path: Path) -> Path:
    home = tmp_path / "examples" / "regression"
    (home.parent / "data").mkdir(parents=True)
    (home.parent / "data" / "train.csv").write_text("\n".join(f"{i},{i + 1},{2 * i + 1}" for i in range(16)) + "\n")
    for folder in ("data", "checkpoints", "runs"):
        (home / folder).mkdir(parents=True)
    (home / "data" / "scale.txt").write_text("0.1\n")
    (home / "checkpoints" / "model.pt").write_bytes(b"the user's last checkpoint")
    (home / "runs" / "train.log").write_text("the user's log\n")
    (home / "train.py").write_text(READS_AND_WRITES)
    return home


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.multiprocess
def test_a_staged_run_reads_the_users_data_in_place_and_never_writes_it(tmp_path: Path) -> None:
    from accelify.verify.runner import Launcher, RunSpec
    from accelify.verify.workspace import stage

    home = _project(tmp_path / "user")
    before = _tree(tmp_path / "user")
    folder = stage(ScriptFiles.from_path(home / "train.py"), tmp_path / "run")
    assert folder == tmp_path / "run" / "examples" / "regression"
    assert (tmp_path / "run" / "examples" / "data").is_symlink() and (folder / "data").is_symlink()
    outcome = Launcher().run(RunSpec(label="original", folder=folder, target="train.py", logs=tmp_path / "logs"))
    assert outcome.ok, "".join(outcome.stderr)
    assert "done" in outcome.stdout[0]
    assert _tree(tmp_path / "user") == before  # nothing of the user's changed
    assert (folder / "checkpoints" / "model.pt").read_bytes() != b"the user's last checkpoint"
    assert (folder / "runs" / "train.log").read_text().startswith("the user's log\n")  # appended to a copy
    assert (folder / "data" / "scale.txt").read_text() == "overwritten\n"
    assert (folder / "runs" / "latest").is_dir()


@pytest.mark.multiprocess
def test_verify_runs_a_script_whose_data_lie_next_to_it_and_above_it(tmp_path: Path,
                                                                   verification_pool: VerificationPool) -> None:
    """Through the session's fork servers (a fresh interpreter reads the staged data the same way: the test above)."""
    from accelify.verify import VerifyOptions, verify_script

    home = _project(tmp_path / "user")
    before = _tree(tmp_path / "user")
    report = verify_script(home / "train.py", options=VerifyOptions(steps=3, timeout=120),
                           launcher=verification_pool.launcher)
    ran = {c.name: c.status for c in report.checks}
    assert ran["original runs"] == "passed" and ran["converted runs"] == "passed", report.verdict
    assert _tree(tmp_path / "user") == before


# A program whose training is in its own package (relative imports inside it) and in a folder without an
# ``__init__.py`` (a namespace package): verify must read the program as convert does.
PACKAGE_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from engine import fit
from models.linear import make_model

model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
fit(model, optimizer, loader)
"""
PACKAGE_LOOPS = """\
import torch
from .steps import step


def fit(model, optimizer, loader):
    for x, y in loader:
        loss = step(model, optimizer, x, y)
    print("last loss", loss)
"""
PACKAGE_STEPS = """\
import torch


def step(model, optimizer, x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()
"""


def _package_program(home: Path) -> None:
    files = {"train.py": PACKAGE_TRAIN, "engine/__init__.py": "from .loops import fit\n", "engine/loops.py": PACKAGE_LOOPS,
             "engine/steps.py": PACKAGE_STEPS, "models/linear.py": "import torch\n\n\ndef make_model():\n"
             "    return torch.nn.Linear(2, 1)\n", "notes/unrelated.py": "import torch\n"}
    for name, text in files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)


def test_verify_converts_a_package_program_as_convert_does(tmp_path: Path) -> None:
    from accelify.pipeline import convert_path
    from accelify.verify.workspace import stage

    home = tmp_path / "project"
    _package_program(home)
    files = ScriptFiles.from_path(home / "train.py")
    assert {p.name for p in files.packages} == {"engine", "models"}  # models/ has no __init__.py; notes/ is not imported
    converted, result = convert_files(files)
    alone = convert_path(home / "train.py")
    assert result.status == alone.status == "converted"
    assert converted.source == alone.new
    by_convert = {Path(c.path).relative_to(home).as_posix(): c.new for c in alone.companions if c.changed}
    assert set(by_convert) == {"engine/loops.py", "engine/steps.py"}
    assert {name: text for name, text in converted.modules if name in by_convert} == by_convert
    folder = stage(converted, tmp_path / "run")  # the run gets the converted package modules, the others as they are
    assert (folder / "engine" / "steps.py").read_text() == by_convert["engine/steps.py"]
    assert (folder / "engine" / "__init__.py").read_text() == "from .loops import fit\n"
    assert (folder / "models" / "linear.py").read_text().startswith("import torch")
    assert not (folder / "engine").is_symlink() and (home / "engine" / "steps.py").read_text() == PACKAGE_STEPS


def test_verify_refuses_a_package_program_as_convert_does(tmp_path: Path) -> None:
    """A trainer module the program cannot give the accelerator: convert says attention, so verify does too (it
    said "unchanged" when it looked only at the flat modules of the script's folder)."""
    from accelify.pipeline import convert_path

    home = tmp_path / "project"
    _package_program(home)
    (home / "engine" / "loops.py").write_text(PACKAGE_LOOPS.replace("def fit(model, optimizer, loader):",
                                                                    "def fit(model, optimizer, loader):\n"
                                                                    "    optimizer = torch.optim.Adam(model.parameters())"))
    converted, result = convert_files(ScriptFiles.from_path(home / "train.py"))
    alone = convert_path(home / "train.py")
    assert result.status == "attention"
    assert (result.status, [w.code for w in result.warnings]) == (alone.status, [w.code for w in alone.warnings])
    assert [(Path(c.path).name, [w.code for w in c.warnings]) for c in result.companions] == \
        [(Path(c.path).name, [w.code for w in c.warnings]) for c in alone.companions]


def test_verify_of_a_module_the_entry_trains_through_says_what_convert_says(tmp_path: Path) -> None:
    """``accelify verify steps.py`` (a step function whose loop is in the entry's program): convert refuses it naming
    ``train.py``; verify's conversion does the same (it said "unchanged")."""
    from accelify.pipeline import convert_path

    home = tmp_path / "project"
    _package_program(home)
    (home / "steps.py").write_text(PACKAGE_STEPS)
    (home / "train.py").write_text(PACKAGE_TRAIN.replace("from engine import fit", "from steps import step").replace(
        "fit(model, optimizer, loader)", "for x, y in loader:\n    step(model, optimizer, x, y)"))
    _, result = convert_files(ScriptFiles.from_path(home / "steps.py"))
    alone = convert_path(home / "steps.py")
    assert (result.status, alone.status) == ("attention", "attention")
    assert [w.fix for w in result.warnings] == [w.fix for w in alone.warnings]
    assert result.warnings[0].fix.startswith("convert ") and "train.py instead" in result.warnings[0].fix


def test_verify_of_a_file_inside_a_package_says_what_convert_says(tmp_path: Path) -> None:
    """``accelify verify engine/loops.py``: its ``from .steps import step`` is read from the package's root, as
    convert reads it (attention: the entry ``train.py`` builds what it trains); verify said "unchanged"."""
    from accelify.pipeline import convert_path

    home = tmp_path / "project"
    _package_program(home)
    _, result = convert_files(ScriptFiles.from_path(home / "engine" / "loops.py"))
    alone = convert_path(home / "engine" / "loops.py")
    assert result.status == alone.status == "attention"
    assert [w.code for c in result.companions for w in c.warnings] == ["ACC012"]


ROOT_HELPER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    return DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
"""
ROOT_SCRIPT = """\
import torch
from helpers.data import make_loader
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in make_loader():
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


def test_verify_finds_the_packages_of_an_installed_projects_root_as_convert_does(tmp_path: Path) -> None:
    """cleanrl's layout: ``algos/train.py`` imports ``helpers`` beside ``algos/`` at the root of a project installed
    for development (``pyproject.toml``). convert reads the helper (the loader is followed); verify read only the
    script's folder, so its conversion refused what convert converts (ACC021)."""
    from accelify.pipeline import convert_path
    from accelify.verify.workspace import stage

    home = tmp_path / "project"
    for name, text in {"pyproject.toml": "", "helpers/__init__.py": "", "helpers/data.py": ROOT_HELPER,
                       "algos/__init__.py": "", "algos/train.py": ROOT_SCRIPT, "docs/__init__.py": ""}.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    files = ScriptFiles.from_path(home / "algos" / "train.py")
    assert [p.relative_to(home).as_posix() for p in files.packages] == ["helpers"]  # docs/ is not imported
    converted, result = convert_files(files)
    alone = convert_path(home / "algos" / "train.py")
    assert result.status == alone.status == "converted"
    assert converted.source == alone.new
    folder = stage(converted, tmp_path / "run")  # beside the script in the run, first on the import path
    assert (folder / "helpers" / "data.py").read_text() == ROOT_HELPER
