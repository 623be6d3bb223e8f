"""[tool.accelify] settings, candidate discovery and atomic writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelify.errors import ConfigError
from accelify.settings import Settings, load_settings
from accelify.migrate.discovery import candidates
from accelify.source import write_atomic


def test_settings_defaults_file_values_and_flags(tmp_path: Path) -> None:
    assert load_settings(tmp_path) == Settings()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.accelify]\ntarget = "accelerate"\nexclude = ["old/*"]\ndisable = ["print"]\n'
    )
    (tmp_path / "sub").mkdir()
    settings = load_settings(tmp_path / "sub")
    assert (settings.target, settings.exclude, settings.disable) == ("accelerate", ("old/*",), frozenset({"print"}))
    assert settings.with_flags(target="accelify").target == "accelify"
    assert settings.with_flags(target=None).target == "accelerate"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('target = "deepspeed"', "use one of accelify, accelerate"),
        ("exclude = 3", "exclude must be a list of strings"),
        ('disable = ["nope"]', "unknown rule(s) nope"),
        ('ignore = ["ACC999"]', "unknown rule(s) or code(s) ACC999"),
        ('select = ["nope"]', "unknown rule(s) or code(s) NOPE"),
    ],
)
def test_bad_settings(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.accelify]\n{table}\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings(tmp_path)


def test_an_unknown_key_is_a_note_by_name_not_an_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.accelify]\ncolour = true\ntarget = "accelerate"\n')
    settings = load_settings(tmp_path)
    assert settings.target == "accelerate"
    assert len(settings.notes) == 1 and "unknown key 'colour' ignored" in settings.notes[0]


def test_candidates_import_torch_and_respect_excludes(tmp_path: Path) -> None:
    for name, text in {
        "a.py": "import torch\n",
        "b.py": "from torch.utils.data import DataLoader\n",
        "c.py": "import os\n",
        "old/d.py": "import torch\n",
        ".venv/e.py": "import torch\n",
        "notes.txt": "import torch\n",
    }.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = [p.relative_to(tmp_path).as_posix() for p in candidates(tmp_path, ("old/*",))]
    assert found == ["a.py", "b.py"]


def test_write_atomic_keeps_the_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_bytes(b"old")
    os.chmod(path, 0o750)
    write_atomic(path, b"new")
    assert path.read_bytes() == b"new" and (path.stat().st_mode & 0o777) == 0o750
    assert [p.name for p in tmp_path.iterdir()] == ["t.py"]
