"""The files a verification converts: the script with the modules it imports, never the rest of its folder."""

from __future__ import annotations

from pathlib import Path

import pytest

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
def test_verify_runs_a_script_whose_data_lie_next_to_it_and_above_it(tmp_path: Path) -> None:
    from accelify.verify import VerifyOptions, verify_script

    home = _project(tmp_path / "user")
    before = _tree(tmp_path / "user")
    report = verify_script(home / "train.py", options=VerifyOptions(steps=3, timeout=120))
    ran = {c.name: c.status for c in report.checks}
    assert ran["original runs"] == "passed" and ran["converted runs"] == "passed", report.verdict
    assert _tree(tmp_path / "user") == before
