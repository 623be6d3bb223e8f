"""The files a verification converts: the script with the modules it imports, never the rest of its folder."""

from __future__ import annotations

from pathlib import Path

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
