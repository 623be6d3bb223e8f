"""Files the runtime writes get the mode a plain ``open()``/``torch.save`` would give them (umask applied)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from accelify.runtime import Accelerator
from accelify.runtime.files import atomic_write


@pytest.fixture
def umask_022():  # type: ignore[no-untyped-def]
    saved = os.umask(0o022)
    yield
    os.umask(saved)


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mode & 0o777 for p in folder.rglob("*") if p.is_file()}


def test_save_save_model_and_save_state_write_0644(tmp_path: Path, umask_022: None) -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.save(model.state_dict(), tmp_path / "weights.pt")
    torch.save(model.state_dict(), tmp_path / "plain.pt")
    accelerator.save_model(model, tmp_path / "model")
    accelerator.save_state(tmp_path / "state")
    modes = _modes(tmp_path)
    assert modes["plain.pt"] == 0o644
    assert len(modes) > 4
    assert set(modes.values()) == {0o644}, modes


def test_atomic_write_keeps_an_existing_mode_and_a_symlink(tmp_path: Path, umask_022: None) -> None:
    real = tmp_path / "real.bin"
    real.write_bytes(b"old")
    real.chmod(0o640)
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    atomic_write(link, lambda tmp: Path(tmp).write_bytes(b"new"))
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.bin", "real.bin"]


def test_atomic_write_interrupted_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")

    def broken(tmp: str) -> None:
        Path(tmp).write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, broken)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]
