"""torch is an extra (``accelify[torch]``): converting works without it, the runtime says what to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import importlib.metadata

import pytest

HIDE = 'raise ModuleNotFoundError("No module named \'torch\' (hidden by the test)", name="torch")\n'
CONVERT = """
import sys
from click.testing import CliRunner
from accelify.cli import main
result = CliRunner().invoke(main, ["convert", "--check", sys.argv[1]])
print(result.exit_code)
print(result.output)
print("torch loaded:", "torch" in sys.modules and getattr(sys.modules["torch"], "__file__", "") != sys.argv[2])
"""


def _hidden(tmp_path: Path) -> Path:
    fake = tmp_path / "hide" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(HIDE)
    return fake


def test_torch_is_an_extra_not_a_dependency() -> None:
    requirements = importlib.metadata.requires("accelify") or []
    plain = [r for r in requirements if "extra ==" not in r]
    assert not any(r.startswith("torch") for r in plain), plain
    assert any(r.startswith("torch") and 'extra == "torch"' in r for r in requirements), requirements


@pytest.mark.multiprocess
def test_convert_runs_without_torch_and_the_runtime_says_what_to_install(tmp_path: Path, clean_env) -> None:  # type: ignore[no-untyped-def]
    fake = _hidden(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n")
    env = clean_env({"PYTHONPATH": str(fake.parent)})
    proc = subprocess.run([sys.executable, "-c", CONVERT, str(script), str(fake / "__init__.py")],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("1\n") and "+from accelify.runtime import Accelerator" in proc.stdout
    assert "torch loaded: False" in proc.stdout
    runtime = subprocess.run([sys.executable, "-c", "from accelify.runtime import Accelerator"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert runtime.returncode == 1
    assert "accelify.runtime.Accelerator needs PyTorch" in runtime.stderr
    assert 'pip install "accelify[torch]"' in runtime.stderr
