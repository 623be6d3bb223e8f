"""numpy: torch.distributed's object collectives need it, so accelify declares it and says so when it is missing."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

SCRIPT = """\
from accelify.runtime import Accelerator
accelerator = Accelerator()
print("joined", accelerator.process_index)
"""


def test_numpy_is_a_declared_dependency() -> None:
    requirements = importlib.metadata.requires("accelify") or []
    plain = [r for r in requirements if "extra ==" not in r]
    assert any(re.match(r"numpy\b", r) for r in plain), plain


@pytest.mark.multiprocess
def test_two_processes_without_numpy_fail_at_start_saying_what_to_install(tmp_path: Path, run_distributed) -> None:  # type: ignore[no-untyped-def]
    hidden = tmp_path / "hide" / "numpy"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named numpy (hidden by the test)", name="numpy")\n'
    )
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = run_distributed(script, env={"PYTHONPATH": str(tmp_path / "hide")}, check=False, timeout=120)
    assert proc.returncode != 0
    assert "joined" not in proc.stdout
    # the first process to fail says it; torchrun then stops the other, which may not have written its own line yet
    # (a CI run saw only process 1's): at least one process names itself, and none gets further than the check
    said = [rank for rank in (0, 1) if f"Process {rank} of 2: numpy is not installed" in proc.stderr]
    assert said, proc.stderr[-3000:]
    assert "pip install numpy" in proc.stderr
