"""``[tool.accelify]`` as convert and migrate read it: per path, select/ignore, excludes, flags win."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.settings import SettingsFinder, load_settings

SCRIPT = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nprint(1)\nx = y.cuda(3)\n"
REFUSED = ("import torch\nimport torch.distributed as dist\n\ndist.init_process_group('gloo')\ngroup = dist.new_group([0])\n"
           "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pyproject(folder: Path, table: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.accelify]\n{table}\n")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def convert(*args: str) -> "object":
    return CliRunner().invoke(main, ["convert", *args], catch_exceptions=False)


def test_select_and_ignore_by_rule_name_or_warning_code(project: Path) -> None:
    write(project, "train.py", SCRIPT)
    pyproject(project, 'ignore = ["ACC013", "print"]')
    result = convert("train.py")
    assert "ACC013" not in result.stderr and "accelerator.print" not in result.stdout
    assert "+model, opt = accelerator.prepare(model, opt)" in result.stdout
    pyproject(project, 'select = ["ACC01"]')  # a code prefix: warnings only; every rule runs
    result = convert("train.py")
    assert "ACC013" in result.stderr and "+accelerator.print(1)" in result.stdout
    settings = load_settings(project)
    assert settings.shows("ACC013") and not settings.shows("ACC002") and not settings.disable


def test_disable_keeps_working_and_select_names_rules(project: Path) -> None:
    from accelify.codemods import RULE_NAMES

    pyproject(project, 'disable = ["progress"]\nselect = ["backward", "accelerator", "imports", "prepare"]')
    settings = load_settings(project)
    assert settings.disable == frozenset(RULE_NAMES) - {"backward", "accelerator", "imports", "prepare"}
    assert "progress" in settings.disable


def test_a_refused_file_keeps_its_warnings_whatever_ignore_says(project: Path) -> None:
    write(project, "dp.py", REFUSED)
    pyproject(project, 'ignore = ["ACC003"]')
    result = convert("dp.py")
    assert result.exit_code == 1 and "ACC003" in result.stderr


def test_each_path_gets_its_nearest_pyproject_and_flags_win(project: Path) -> None:
    pyproject(project / "a", 'target = "accelerate"')
    pyproject(project / "b", 'target = "accelify"')
    write(project, "a/train.py", SCRIPT)
    write(project, "b/train.py", SCRIPT)
    result = convert("a/train.py", "b/train.py")
    diffs = result.stdout.split("--- a/")
    assert "+from accelerate import Accelerator" in diffs[1] and "+from accelify.runtime import Accelerator" in diffs[2]
    flagged = convert("--target", "accelify", "a/train.py")
    assert "+from accelify.runtime import Accelerator" in flagged.stdout
    finder = SettingsFinder(target="accelerate")
    assert finder(project / "b" / "train.py").target == "accelerate"


def test_exclude_extend_exclude_and_force_exclude(project: Path) -> None:
    pyproject(project, 'exclude = ["legacy/"]\nextend-exclude = ["*_old.py"]')
    write(project, "legacy/train.py", SCRIPT)
    write(project, "train_old.py", SCRIPT)
    write(project, "train.py", SCRIPT)
    settings = load_settings(project)
    assert settings.is_excluded(project / "legacy" / "train.py") and settings.is_excluded(project / "sub" / "a_old.py")
    assert not settings.is_excluded(project / "train.py")
    folder = convert(".", "--json")
    assert [r["path"] for r in json.loads(folder.stdout)] == ["train.py"]
    named = convert("legacy/train.py", "train_old.py", "train.py", "--check")
    assert "--- a/legacy/train.py" in named.stdout  # named explicitly: converted, as before
    forced = convert("legacy/train.py", "train_old.py", "train.py", "--check", "--force-exclude")
    assert forced.exit_code == 1 and "legacy" not in forced.stdout + forced.stderr and "train_old" not in forced.stdout
    assert "--- a/train.py" in forced.stdout


def test_unknown_keys_are_warned_about_by_name(project: Path) -> None:
    pyproject(project, 'colour = "blue"\ntarget = "accelerate"')
    write(project, "train.py", SCRIPT)
    result = convert("train.py")
    assert result.exit_code == 0
    assert "unknown key 'colour' ignored" in result.stderr and "+from accelerate import Accelerator" in result.stdout
