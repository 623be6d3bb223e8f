"""``accelify convert``: every mode and exit code, bad input left byte for byte untouched, config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.migrate.discovery import candidates

from _shared_module import SHARED_A, SHARED_B, SHARED_HELPER

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


WRITER_SCRIPT = (  # the writer is passed to a function: not converted (on the other processes it would be None)
    b"import torch\nfrom torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter('runs')\n"
    b"model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    b"def log_to(w, value):\n    w.add_scalar('loss', value)\n"
    b"for x in torch.ones(4, 2):\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"
    b"    log_to(writer, loss.item())\n"
)


def test_check_keeps_failing_on_problems_left_in_a_converted_file(project: Path) -> None:
    """A warning left to the user (a SummaryWriter on every process) is reported again when the converted file is
    checked, and --check fails until it is fixed; then it is quiet."""
    path = write(project, "train.py", WRITER_SCRIPT)
    assert "ACC024" in run("--in-place", "train.py").stderr
    result = run("--check", "train.py")
    assert result.exit_code == 1 and "ACC024" in result.stderr and "+" not in result.stdout
    assert run("--check", "-q", "train.py").stdout == "problems left: train.py\n"
    fixed = path.read_text().replace("writer = SummaryWriter('runs')",
                                     "writer = SummaryWriter('runs') if accelerator.is_main_process else None")
    path.write_text(fixed.replace("    log_to(writer", "    if writer is not None:\n        log_to(writer"))
    clean = run("--check", "train.py")
    assert clean.exit_code == 0 and "ACC024" not in clean.stderr


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
    from accelify.codemods.engine import transform as engine

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


# ---------------------------------------------------------------- what users expect of written files


@pytest.fixture
def umask():  # type: ignore[no-untyped-def]
    """Set the process umask for one test, then restore it."""
    import os

    saved = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_files_get_the_mode_open_would_give(project: Path, umask, mask: int, mode: int) -> None:  # type: ignore[no-untyped-def]
    write(project, "a.py", SCRIPT)
    umask(mask)
    assert run("a.py", "-o", "out.py").exit_code == 0
    assert run("a.py", "-o", "outdir/").exit_code == 0
    assert (project / "out.py").stat().st_mode & 0o777 == mode
    assert (project / "outdir" / "a.py").stat().st_mode & 0o777 == mode


def test_in_place_keeps_the_mode_of_the_file(project: Path, umask) -> None:  # type: ignore[no-untyped-def]
    path = write(project, "train.py", SCRIPT)
    path.chmod(0o750)
    umask(0o077)
    assert run("--in-place", "train.py").exit_code == 0
    assert path.read_bytes().endswith(CONVERTED_TAIL)
    assert path.stat().st_mode & 0o777 == 0o750


def test_in_place_on_a_symlink_rewrites_its_target_and_keeps_the_link(project: Path) -> None:
    real = write(project, "src/train.py", SCRIPT)
    link = project / "train.py"
    link.symlink_to(Path("src") / "train.py")
    assert run("--in-place", "train.py").exit_code == 0
    assert link.is_symlink() and link.readlink() == Path("src") / "train.py"
    assert real.read_bytes().endswith(CONVERTED_TAIL)
    assert sorted(p.name for p in (project / "src").iterdir()) == ["train.py"]  # no temporary file left


def test_syntax_error_shows_pythons_own_message(project: Path) -> None:
    path = write(project, "old.py", b"import torch\nprint 'hello'\n")
    result = run("--in-place", "old.py")
    assert result.exit_code == 2
    assert "old.py:2:1: syntax error: Missing parentheses in call to 'print'" in result.stderr
    assert path.read_bytes() == b"import torch\nprint 'hello'\n"


def test_an_explicit_file_that_is_skipped_says_why(project: Path) -> None:
    write(project, "util.py", b"import os\n")
    write(project, "train.ipynb", b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    write(project, "legacy.py", b"# accelify: skip-file\n" + SCRIPT)
    result = run("util.py", "train.ipynb", "legacy.py")
    assert result.exit_code == 0
    assert "util.py: skipped: does not import torch" in result.stderr
    assert "train.ipynb: skipped: does not import torch" in result.stderr  # a notebook without code cells
    assert "legacy.py: skipped: # accelify: skip-file" in result.stderr


def test_ctrl_c_while_writing_leaves_whole_files_and_says_which(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during the third write: the first two are whole, the third untouched, no temporary file."""
    import accelify.runtime.files as files

    for name in ("a.py", "b.py", "c.py", "d.py"):
        write(project, name, SCRIPT)
    real_fsync, calls = files.fsync_path, []

    def interrupted_fsync(path: str) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real_fsync(path)

    monkeypatch.setattr(files, "fsync_path", interrupted_fsync)
    result = CliRunner().invoke(main, ["convert", "--in-place", "a.py", "b.py", "c.py", "d.py"])
    assert result.exit_code == 130
    assert "interrupted: 2 files had been written" in result.stderr
    assert "  a.py\n  b.py\n" in result.stderr
    assert (project / "a.py").read_bytes().endswith(CONVERTED_TAIL)
    assert (project / "b.py").read_bytes().endswith(CONVERTED_TAIL)
    assert (project / "c.py").read_bytes() == SCRIPT and (project / "d.py").read_bytes() == SCRIPT
    assert sorted(p.name for p in project.iterdir()) == ["a.py", "b.py", "c.py", "d.py", "pyproject.toml"]


@pytest.mark.multiprocess
def test_sigint_exits_130_and_every_written_file_is_whole(project: Path) -> None:
    """A real SIGINT to a real process, mid-run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    corpus = Path(__file__).resolve().parents[2] / "corpus" / "main_helpers"
    data = (corpus / "input.py").read_bytes()
    expected = (corpus / "expected.py").read_bytes()
    names = [f"train_{i:03d}.py" for i in range(300)]
    for name in names:
        write(project / "src", name, data)
    # Ctrl-C as a terminal sends it: with the default handler, whatever ran this test (a background job that
    # ignores SIGINT, as `cmd &` in a script does, passes that on to its children)
    start = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from accelify.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", start, "convert", "-o", "out/", *[f"src/{n}" for n in names]],
        cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    out = project / "out"
    deadline = time.monotonic() + 60
    def finished() -> bool:  # a whole output file exists (not only the temporary of the first one)
        return out.is_dir() and any(p.name in names for p in out.iterdir())

    while not finished() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    written = sorted(os.listdir(out))
    assert 0 < len(written) < len(names), "the interrupt should land mid-run"
    assert all((out / name).read_bytes() == expected for name in written)  # whole files, no temporaries
    assert f"interrupted: {len(written)} file" in stderr
    assert all(f"out/{name}" in stderr for name in written)
    assert "Traceback" not in stderr


REFUSED = b"""import torch
model = torch.distributed.init_process_group("gloo") or torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
"""


def test_a_refused_file_needs_attention_exits_1_and_is_not_written(project: Path) -> None:
    write(project, "dp.py", REFUSED)
    result = run("dp.py", "-o", "out/")
    assert result.exit_code == 1, result.stderr
    assert "dp.py:2:9: ACC003" in result.stderr
    assert "dp.py: needs attention, not converted:" in result.stderr
    assert "0 files converted, 1 needs attention" in result.stderr
    assert not (project / "out" / "dp.py").exists()
    assert run("dp.py", "--exit-zero").exit_code == 0
    assert (project / "dp.py").read_bytes() == REFUSED


def test_json_reports_the_attention_status(project: Path) -> None:
    import json

    write(project, "dp.py", REFUSED)
    result = run("dp.py", "--json")
    assert result.exit_code == 1
    [entry] = json.loads(result.stdout)
    assert entry["status"] == "attention" and entry["warnings"][0]["code"] == "ACC003"


CANDIDATE_SAMPLES = {
    "plain.py": b"import torch\n",
    "comma.py": b"import os, torch\n",
    "semicolon.py": b"x = 1; import torch\n",
    "nested.py": b"try:\n    import torch.nn as nn\nexcept ImportError:\n    nn = None\n",
    "continued.py": b"import os, \\\n    torch\n",
    "from_torch.py": b"from torch import nn\n",
    "torchvision_only.py": b"import torchvision\n",
    "mention.py": b"import os  # not torch\n",
    "no_torch.py": b"import os\n",
}


def test_folder_discovery_and_a_named_file_decide_the_same_way(project: Path) -> None:
    """One candidate test: a file found in a folder gets the status it gets when named on its own."""
    from accelify.pipeline import convert_path

    for name, data in CANDIDATE_SAMPLES.items():
        write(project, f"pkg/{name}", data)
    found = {p.name for p in candidates(project / "pkg")}
    for name in CANDIDATE_SAMPLES:
        named = convert_path(project / "pkg" / name)
        imports = named.reason != "does not import torch"
        assert not imports or name in found, f"{name} imports torch but folder discovery missed it"
    assert {n for n in CANDIDATE_SAMPLES if convert_path(project / "pkg" / n).reason != "does not import torch"} == {
        "plain.py", "comma.py", "semicolon.py", "nested.py", "continued.py", "from_torch.py",
    }
    result = run("pkg", "--json")
    statuses = {Path(e["path"]).name: (e["status"], e["reason"]) for e in json.loads(result.stdout)}
    assert set(statuses) == {"plain.py", "comma.py", "semicolon.py", "nested.py", "continued.py", "from_torch.py"}
    for name, status in statuses.items():
        named = convert_path(project / "pkg" / name)
        assert status == (named.status, named.reason), name


# A script and the local module whose loop it calls (the conversion edits both).
LOOP_HELPERS = b"import torch\n\n\ndef fit(model, loader, optimizer):\n    for x, y in loader:\n" \
          b"        loss = torch.nn.functional.mse_loss(model(x), y)\n        loss.backward()\n        optimizer.step()\n"
LOOP_SCRIPT = b"import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\nfrom helpers import fit\n\n" \
         b"model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n" \
         b"loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)\nfit(model, loader, opt)\n"


def test_a_named_module_of_a_named_script_is_converted_with_it_only(project: Path) -> None:
    """pre-commit names every staged file: helpers.py, which train.py imports, is its companion, not a script."""
    helpers, script = LOOP_HELPERS, LOOP_SCRIPT
    write(project, "helpers.py", helpers)
    write(project, "train.py", script)
    result = run("--in-place", "helpers.py", "train.py")
    assert result.exit_code == 0, result.output
    assert "ACC012" not in result.stderr and result.stdout.count("converted: helpers.py") == 1
    assert b"accelerator.backward(loss)" in (project / "helpers.py").read_bytes()
    assert run("--check", "helpers.py", "train.py").exit_code == 0


def test_output_file_never_overwrites_a_local_module_the_conversion_changes(project: Path) -> None:
    """-o names where the script goes; the helper it changes would land over its own original: refused, nothing written."""
    helpers, script = LOOP_HELPERS, LOOP_SCRIPT
    write(project, "helpers.py", helpers)
    write(project, "train.py", script)
    result = run("train.py", "-o", "train_dist.py")
    assert result.exit_code == 2
    assert "helpers.py: cannot write" in result.stderr and "-o OUT_DIR/" in result.stderr
    assert (project / "helpers.py").read_bytes() == helpers and not (project / "train_dist.py").exists()
    result = run("train.py", "-o", "out/")
    assert result.exit_code == 0, result.output
    assert b"accelerator.backward(loss)" in (project / "out" / "helpers.py").read_bytes()
    assert (project / "helpers.py").read_bytes() == helpers



def test_scripts_that_edit_a_shared_module_differently_fail_one_at_a_time(project: Path) -> None:
    """The first script's conversion is written with the module; the second fails alone (exit 2), as in migrate."""
    for name, data in (("helpers.py", SHARED_HELPER), ("a.py", SHARED_A), ("b.py", SHARED_B)):
        write(project, name, data)
    preview = run("b.py", "a.py")  # nothing written: the same plan, the same verdict
    assert preview.exit_code == 2 and "a.py: its conversion edits helpers.py differently from the conversion of b.py" in preview.stderr
    assert (project / "helpers.py").read_bytes() == SHARED_HELPER
    result = run("--in-place", "a.py", "b.py")
    assert result.exit_code == 2, result.output
    assert "b.py: its conversion edits helpers.py differently from the conversion of a.py" in result.stderr
    assert "accelerator.backward(loss)" in (project / "helpers.py").read_text()
    assert "accelerator.prepare" in (project / "a.py").read_text() and (project / "b.py").read_bytes() == SHARED_B


def test_the_summary_counts_the_modules_a_conversion_rewrites(project: Path) -> None:
    """K2: ``convert train.py`` rewrote train.py and its engine.py and said "1 file would be converted"."""
    write(project, "helpers.py", SHARED_HELPER)
    write(project, "a.py", SHARED_A)
    result = run("a.py")
    assert result.exit_code == 0, result.output
    assert "+++ b/helpers.py\n" in result.stdout
    assert "2 files would be converted" in result.stderr, result.stderr
