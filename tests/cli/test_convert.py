"""``accelify convert``: every mode and exit code, bad input left byte for byte untouched, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main

SCRIPT = b"import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nprint(1)\n"
CONVERTED_TAIL = b"model, opt = accelerator.prepare(model, opt)\naccelerator.print(1)\naccelerator.end_training()\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with its own pyproject.toml (so the repository's [tool.accelify] does not apply)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args: str) -> "object":
    return CliRunner().invoke(main, ["convert", *args], catch_exceptions=False)


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("flags", [[], ["--diff"]])
def test_default_and_diff_print_the_diff_and_write_nothing(project: Path, flags: list[str]) -> None:
    path = write(project, "train.py", SCRIPT)
    result = run(*flags, "train.py")
    assert result.exit_code == 0, result.output
    assert "--- a/train.py\n+++ b/train.py\n" in result.stdout
    assert "+from accelify.runtime import Accelerator\n" in result.stdout
    assert "1 file would be converted" in result.stderr
    assert path.read_bytes() == SCRIPT


def test_check_exits_1_when_something_would_change_and_0_when_clean(project: Path) -> None:
    path = write(project, "train.py", SCRIPT)
    result = run("--check", "train.py")
    assert result.exit_code == 1 and "+from accelify.runtime import Accelerator" in result.stdout
    assert path.read_bytes() == SCRIPT
    assert run("--in-place", "train.py").exit_code == 0
    assert path.read_bytes().endswith(CONVERTED_TAIL)
    assert run("--check", "train.py").exit_code == 0


def test_in_place_reports_written_files_and_warnings(project: Path) -> None:
    write(project, "train.py", SCRIPT + b"x = y.cuda(3)\n")
    result = run("--in-place", "train.py")
    assert result.exit_code == 0
    assert "converted: train.py" in result.stdout
    assert "train.py:5:5: ACC013 `.cuda(3)` names a device index" in result.stderr


def test_output_file_and_output_folder(project: Path) -> None:
    write(project, "a.py", SCRIPT)
    write(project, "b.py", b"x = 1\n")
    assert run("a.py", "-o", "out.py").exit_code == 0
    assert (project / "out.py").read_bytes().endswith(CONVERTED_TAIL)
    assert (project / "a.py").read_bytes() == SCRIPT
    assert run("a.py", "b.py", "-o", "outdir").exit_code == 0
    assert (project / "outdir" / "a.py").read_bytes().endswith(CONVERTED_TAIL)
    assert (project / "outdir" / "b.py").read_bytes() == b"x = 1\n"


def test_directory_argument_converts_the_torch_candidates(project: Path) -> None:
    write(project, "pkg/train.py", SCRIPT)
    write(project, "pkg/sub/more.py", SCRIPT)
    write(project, "pkg/util.py", b"import os\n")
    write(project, "pkg/.hidden/x.py", SCRIPT)
    result = run("pkg", "-o", "out")
    assert result.exit_code == 0, result.output
    assert sorted(p.relative_to(project / "out").as_posix() for p in (project / "out").rglob("*.py")) == [
        "pkg/sub/more.py",
        "pkg/train.py",
    ]


def test_directory_with_one_candidate_still_writes_a_folder(project: Path) -> None:
    write(project, "pkg/train.py", SCRIPT)
    assert run("pkg", "-o", "out").exit_code == 0
    assert (project / "out" / "pkg" / "train.py").read_bytes().endswith(CONVERTED_TAIL)


def test_json_output(project: Path) -> None:
    write(project, "train.py", SCRIPT)
    result = run("--json", "train.py")
    assert result.exit_code == 0
    (entry,) = json.loads(result.stdout)
    assert entry["path"] == "train.py" and entry["status"] == "converted" and entry["error"] is None
    assert "+accelerator.end_training()" in entry["diff"]


def test_target_accelerate(project: Path) -> None:
    write(project, "train.py", SCRIPT)
    result = run("--target", "accelerate", "train.py")
    assert "+from accelerate import Accelerator\n" in result.stdout


BAD_INPUTS = [
    ("syntax.py", b"import torch\ndef f(:\n", "syntax.py:2:7: syntax error"),
    ("latin.py", b"import torch\nx = '\xff'\n", "cannot be decoded as utf-8"),
    ("binary.py", b"\x7fELF\x00\x00\x01import torch", "binary file"),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD_INPUTS)
def test_bad_input_exits_2_untouched_while_the_others_are_converted(
    project: Path, name: str, data: bytes, message: str
) -> None:
    bad = write(project, name, data)
    good = write(project, "good.py", SCRIPT)
    result = run("--in-place", name, "good.py")
    assert result.exit_code == 2
    assert message in result.stderr
    assert bad.read_bytes() == data
    assert good.read_bytes().endswith(CONVERTED_TAIL)


def test_empty_file_and_missing_file(project: Path) -> None:
    empty = write(project, "empty.py", b"")
    result = run("--check", "empty.py")
    assert result.exit_code == 0 and empty.read_bytes() == b""
    assert "1 skipped" in result.stderr
    missing = run("nope.py")
    assert missing.exit_code == 2 and "nope.py: does not exist" in missing.stderr


def test_flag_conflicts_are_usage_errors(project: Path) -> None:
    write(project, "train.py", SCRIPT)
    assert run("--in-place", "-o", "x.py", "train.py").exit_code == 2
    assert run("--check", "--in-place", "train.py").exit_code == 2
    assert (project / "train.py").read_bytes() == SCRIPT


def test_config_target_disable_exclude_and_flags_win(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.accelify]\ntarget = "accelerate"\ndisable = ["print"]\nexclude = ["legacy/*"]\n'
    )
    write(project, "src/train.py", SCRIPT)
    write(project, "src/legacy/old.py", SCRIPT)
    result = run("src")
    assert "+from accelerate import Accelerator" in result.stdout and "accelerator.print" not in result.stdout
    assert "old.py" not in result.stdout
    flagged = run("--target", "accelify", "src/train.py")
    assert "+from accelify.runtime import Accelerator" in flagged.stdout


def test_bad_config_is_an_error(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.accelify]\ndisable = ["nope"]\n')
    write(project, "train.py", SCRIPT)
    result = run("train.py")
    assert result.exit_code == 2 and "unknown rule(s) nope" in result.stderr


def test_internal_error_is_reported_with_traceback_only_when_verbose(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelify.codemods import engine

    class Broken:
        name = "broken"

        def run(self, ctx: object) -> None:
            raise RuntimeError("boom")

    monkeypatch.setattr(engine, "RULES", (Broken,))
    path = write(project, "train.py", SCRIPT)
    quiet = run("--in-place", "train.py")
    assert quiet.exit_code == 2 and "internal error while converting: RuntimeError: boom" in quiet.stderr
    assert "Traceback" not in quiet.stderr and path.read_bytes() == SCRIPT
    loud = run("--verbose", "train.py")
    assert "Traceback" in loud.stderr


def test_check_as_a_pre_commit_hook_over_several_files(project: Path) -> None:
    """pre-commit passes every staged .py: only files that would change make it fail, and their diff shows."""
    write(project, "train.py", SCRIPT)
    write(project, "util.py", b"def f():\n    return 1\n")
    result = run("--check", "train.py", "util.py")
    assert result.exit_code == 1
    assert "--- a/train.py\n" in result.stdout and "util.py" not in result.stdout
    assert "1 file would be converted, 1 skipped" in result.stderr
    assert run("--check", "util.py").exit_code == 0


def test_check_with_json(project: Path) -> None:
    write(project, "train.py", SCRIPT)
    write(project, "util.py", b"x = 1\n")
    result = run("--check", "--json", "train.py", "util.py")
    assert result.exit_code == 1
    entries = json.loads(result.stdout)
    assert [(e["path"], e["status"]) for e in entries] == [("train.py", "converted"), ("util.py", "skipped")]
    assert entries[0]["diff"].startswith("--- a/train.py\n") and entries[1]["diff"] == ""
    clean = run("--check", "--json", "util.py")
    assert clean.exit_code == 0 and json.loads(clean.stdout)[0]["status"] == "skipped"


TABBED = b"import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in loader:\n\tloss = model(x).sum()\n\tloss.backward()\n"


def test_piped_diff_is_plain_and_applies_as_a_patch(project: Path) -> None:
    """Not a terminal: no colour codes, and tabs and `[markup]` stay as they are in the file."""
    write(project, "train.py", TABBED + b"\tprint('[bold]x[/bold]')\n")
    result = run("train.py")
    assert "\x1b[" not in result.stdout
    assert "\n-\tloss.backward()\n" in result.stdout and "\n+\taccelerator.backward(loss)\n" in result.stdout
    assert "+\taccelerator.print('[bold]x[/bold]')\n" in result.stdout


def test_diff_is_coloured_on_a_terminal_and_plain_elsewhere() -> None:
    import io

    from rich.console import Console

    from accelify import console as view
    from accelify.pipeline import convert_source

    result = convert_source(TABBED.decode(), path="train.py")
    terminal = io.StringIO()
    view.print_diff(Console(file=terminal, force_terminal=True, color_system="standard", soft_wrap=True), result)
    coloured = terminal.getvalue()
    assert "\x1b[32m+\x1b[0m" not in coloured  # whole lines are styled, not single characters
    assert "\x1b[32m+from accelify.runtime import Accelerator" in coloured
    assert "\x1b[31m-" in coloured and "\x1b[1m--- a/train.py" in coloured and "\x1b[36m@@ " in coloured
    plain = io.StringIO()
    view.print_diff(Console(file=plain, force_terminal=False), result)
    assert plain.getvalue() == view.unified_diff(result) and "\x1b" not in plain.getvalue()
