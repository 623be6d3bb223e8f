"""``accelify migrate``: modes and exit codes, the mirror, companions written once, discovery, reports,
bad input as rows, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.migrate.grouping import plan
from accelify.settings import SettingsFinder

from _shared_module import SHARED_A, SHARED_B, SHARED_HELPER

SCRIPT = b"import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nprint(1)\n"
CONVERTED_TAIL = b"model, opt = accelerator.prepare(model, opt)\naccelerator.print(1)\naccelerator.end_training()\n"
REFUSED = (b"import torch\nimport torch.distributed as dist\n\ndist.init_process_group('gloo')\ngroup = dist.new_group([0])\n"
           b"model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n")
HELPERS = b"""import torch


def fit(model, loader, optimizer):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
USES_HELPERS = b"""import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import fit

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
fit(model, loader, opt)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with its own pyproject.toml (so the repository's [tool.accelify] does not apply)."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def run(*args: str) -> "object":
    return CliRunner().invoke(main, ["migrate", "--jobs", "1", *args], catch_exceptions=False)


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every file below ``folder``: its bytes, or ``-> target`` for a link."""
    out: dict[str, bytes | str] = {}
    for current, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(current) / name
            if path.is_symlink():
                out[path.relative_to(folder).as_posix()] = "-> " + os.readlink(path)
            elif path.is_file():
                out[path.relative_to(folder).as_posix()] = path.read_bytes()
    return out


def test_preview_writes_nothing_and_shows_the_summary(project: Path) -> None:
    write(project, "src/train.py", SCRIPT)
    write(project, "src/util.py", b"import os\n")
    before = tree(project)
    result = run("src")
    assert result.exit_code == 0, result.output
    assert tree(project) == before
    assert "would be converted" in result.stderr and "other files (no torch import)" in result.stderr
    summary = {line.rsplit(None, 1)[0].strip(): line.rsplit(None, 1)[1] for line in result.stderr.splitlines()
               if line.strip() and line.rsplit(None, 1)[-1].isdigit()}
    assert summary["would be converted"] == "1" and summary["other files (no torch import)"] == "1"


def test_diff_prints_and_check_exits_1_while_anything_would_change(project: Path) -> None:
    write(project, "src/train.py", SCRIPT)
    diff = run("src", "--diff")
    assert diff.exit_code == 0 and "--- a/src/train.py" in diff.stdout and "+from accelify.runtime import Accelerator" in diff.stdout
    assert run("src", "--check").exit_code == 1
    assert run("src", "--in-place").exit_code == 0
    assert (project / "src/train.py").read_bytes().endswith(CONVERTED_TAIL)
    assert run("src", "--check").exit_code == 0


def test_attention_exits_1_unless_exit_zero_and_the_table_gives_the_first_reason(project: Path) -> None:
    write(project, "src/dp.py", REFUSED)
    result = run("src", "--in-place")
    assert result.exit_code == 1
    assert (project / "src/dp.py").read_bytes() == REFUSED
    assert "needs attention" in result.stderr and "src/dp.py" in result.stderr
    assert "manual distributed code (`dist.new_group`) is not converted" in result.stderr
    assert run("src", "--in-place", "--exit-zero").exit_code == 0


def test_flag_conflicts_are_usage_errors(project: Path) -> None:
    write(project, "src/train.py", SCRIPT)
    assert run("src", "--in-place", "--out", "o").exit_code == 2
    assert run("src", "--check", "--in-place").exit_code == 2
    assert run("src", "--diff", "--out", "o").exit_code == 2
    assert (project / "src/train.py").read_bytes() == SCRIPT


def test_out_mirrors_the_tree_byte_for_byte_with_links_kept(project: Path) -> None:
    src = project / "src"
    write(project, "src/train.py", SCRIPT)
    write(project, "src/pkg/more.py", SCRIPT)
    write(project, "src/util.py", b"import os\r\n")
    write(project, "src/data/weights.bin", bytes(range(256)))
    write(project, "src/.github/workflow.yml", b"on: push\n")
    write(project, "src/dp.py", REFUSED)
    write(project, "src/bad.py", b"import torch\nx = (\n")
    os.symlink("train.py", src / "link.py")
    os.symlink("data", src / "data_link")
    os.chmod(src / "util.py", 0o751)
    result = run("src", "--out", "out")
    assert result.exit_code == 2, result.output  # bad.py failed; everything else was still done
    original, mirrored = tree(src), tree(project / "out")
    assert set(mirrored) == set(original)
    for name, data in original.items():
        if name in ("train.py", "pkg/more.py"):
            assert isinstance(mirrored[name], bytes) and mirrored[name].endswith(CONVERTED_TAIL)
        else:
            assert mirrored[name] == data, name
    assert (project / "out/link.py").is_symlink() and os.readlink(project / "out/link.py") == "train.py"
    assert (project / "out/util.py").stat().st_mode & 0o777 == 0o751
    assert tree(src) == original  # the source tree is untouched
    again = run("src", "--out", "out")
    assert again.exit_code == 2 and "--out must name a folder that does not exist or is empty" in again.stderr


def test_in_place_keeps_the_mode_and_a_link_stays_a_link(project: Path) -> None:
    real = write(project, "src/train.py", SCRIPT)
    os.chmod(real, 0o700)
    os.symlink("train.py", project / "src/alias.py")
    assert run("src", "--in-place").exit_code == 0
    assert real.read_bytes().endswith(CONVERTED_TAIL) and real.stat().st_mode & 0o777 == 0o700
    assert (project / "src/alias.py").is_symlink()
    assert sorted(p.name for p in (project / "src").iterdir()) == ["alias.py", "train.py"]


def test_a_module_two_scripts_import_is_converted_with_them_and_written_once(project: Path) -> None:
    src = project / "src"
    write(project, "src/helpers.py", HELPERS)
    write(project, "src/a.py", USES_HELPERS)
    write(project, "src/b.py", USES_HELPERS)
    jobs = plan(sorted(src.iterdir()), SettingsFinder())
    assert len(jobs) == 1
    assert [Path(t.path).name for t in jobs[0].tasks] == ["a.py", "b.py"]
    assert [Path(m).name for m in jobs[0].modules] == ["helpers.py"]
    result = run("src", "--in-place", "--report", "r.json")
    assert result.exit_code == 0, result.output
    assert b"def fit(model, loader, optimizer, accelerator):" in (src / "helpers.py").read_bytes()
    assert b"accelerator.backward(loss)" in (src / "helpers.py").read_bytes()
    report = json.loads((project / "r.json").read_text())
    rows = {f["path"]: f for f in report["files"]}
    assert rows["src/helpers.py"]["status"] == "converted" and rows["src/helpers.py"]["companion_of"] == "src/a.py"
    assert [line for line in result.stdout.splitlines() if "helpers.py" in line] == ["written: src/helpers.py"]


def test_gitignore_exclude_settings_and_flags_decide_what_is_converted(project: Path) -> None:
    src = project / "src"
    write(project, "src/.gitignore", b"generated/\n*.tmp.py\n!keep.tmp.py\n")
    write(project, "src/generated/train.py", SCRIPT)
    write(project, "src/skip.tmp.py", SCRIPT)
    write(project, "src/keep.tmp.py", SCRIPT)
    write(project, "src/legacy/old.py", SCRIPT)
    write(project, "src/scratch/try.py", SCRIPT)
    write(project, "src/train.py", SCRIPT)
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.accelify]\nexclude = ["legacy/"]\nfavourite = 1\n')
    result = run("src", "--out", "out", "--exclude", "scratch/", "--report", "r.json")
    assert result.exit_code == 0, result.output
    assert "unknown key 'favourite' ignored" in result.stderr
    out = project / "out"
    assert (out / "train.py").read_bytes().endswith(CONVERTED_TAIL)
    assert (out / "keep.tmp.py").read_bytes().endswith(CONVERTED_TAIL)
    assert (out / "legacy/old.py").read_bytes() == SCRIPT and (out / "scratch/try.py").read_bytes() == SCRIPT
    assert not (out / "generated").exists() and not (out / "skip.tmp.py").exists()  # ignored: not part of the tree
    totals = json.loads((project / "r.json").read_text())["totals"]
    assert (totals["converted"], totals["excluded"]) == (2, 2)


def test_bad_input_is_a_row_never_a_crash_and_is_left_untouched(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import accelify.migrate.discovery as discovery

    src = project / "src"
    write(project, "src/train.py", SCRIPT)
    write(project, "src/syntax.py", b"import torch\nprint 'hi'\n")
    write(project, "src/latin.py", b"import torch\nname = '\xe9t\xe9'\n")
    write(project, "src/locked.py", SCRIPT)
    write(project, "src/empty.py", b"")
    write(project, "src/pkg/__init__.py", b"")
    write(project, "src/huge.py", b"import torch\n" + b"x = 1\n" * 400)
    write(project, "src/broken.ipynb", b'{"cells": [import torch')
    os.symlink("loop.py", src / "loop.py")
    os.symlink("missing.py", src / "dangling.py")
    monkeypatch.setattr(discovery, "MAX_SCRIPT_BYTES", 1024)
    real_read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "locked.py":
            raise PermissionError(13, "Permission denied")
        return real_read(self)

    before = tree(src)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    result = run("src", "--in-place", "--report", "r.json")
    assert result.exit_code == 2, result.output
    monkeypatch.setattr(Path, "read_bytes", real_read)
    after = tree(src)
    assert after.pop("train.py").endswith(CONVERTED_TAIL)  # type: ignore[union-attr]
    before.pop("train.py")
    assert after == before
    rows = {f["path"]: f for f in json.loads((project / "r.json").read_text())["files"]}
    expect = {
        "src/syntax.py": ("failed", "syntax error: Missing parentheses in call to 'print'"),
        "src/latin.py": ("failed", "cannot be decoded as utf-8"),
        "src/locked.py": ("failed", "cannot be read: Permission denied"),
        "src/broken.ipynb": ("failed", "not valid notebook JSON"),
        "src/empty.py": ("skipped", "empty file"),
        "src/huge.py": ("skipped", "larger than"),
        "src/loop.py": ("skipped", "a symbolic link loop"),
        "src/dangling.py": ("skipped", "a broken symbolic link"),
    }
    for path, (status, text) in expect.items():
        row = rows[path]
        assert row["status"] == status, row
        assert text in " ".join(row["errors"] + [row["reason"] or ""]), row
        assert path in result.stderr  # a row of the table
    assert "src/pkg/__init__.py" not in rows


def test_json_report_schema(project: Path) -> None:
    write(project, "src/train.py", SCRIPT + b"x = y.cuda(3)\n")
    write(project, "src/dp.py", REFUSED)
    write(project, "src/util.py", b"import os\n")
    result = run("src", "--report", "r.json", "--exit-zero")
    assert result.exit_code == 0
    report = json.loads((project / "r.json").read_text())
    assert report["schema"] == "accelify-migrate-report/1"
    assert report["tool"]["name"] == "accelify" and report["tool"]["version"]
    assert report["mode"] == "preview" and report["exit_code"] == 0
    assert report["totals"] == {"files": 2, "converted": 1, "unchanged": 0, "attention": 1, "skipped": 0, "failed": 0,
                                "warnings": 2, "not_candidates": 1, "excluded": 0, "written": 0, "copied": 0}
    train = next(f for f in report["files"] if f["path"] == "src/train.py")
    assert set(train) == {"path", "status", "reason", "changes", "warnings", "errors", "written_to", "companion_of"}
    assert train["changes"] and train["errors"] == []
    assert train["warnings"][0] | {"message": ""} == {
        "code": "ACC013", "line": 5, "column": 5, "message": "", "fix": train["warnings"][0]["fix"], "path": "src/train.py"}


def test_html_review_page_is_self_contained_with_warnings_next_to_their_lines(project: Path) -> None:
    write(project, "src/train.py", SCRIPT + b"x = y.cuda(3)\n")
    write(project, "src/dp.py", REFUSED)
    assert run("src", "--html", "review.html", "--exit-zero").exit_code == 0
    page = (project / "review.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "src=" not in page and "http" not in page
    assert '<a href="#f-src-train-py">src/train.py</a>' in page and 'id="f-src-dp-py"' in page
    rows = page.split("<tr")
    cuda = next(i for i, row in enumerate(rows) if "y.cuda(3)" in row and 'class="n">5<' in row)
    assert "ACC013" in rows[cuda + 1] and "warn" in rows[cuda + 1]  # the warning right below its line
    assert any('class="add">' in row and "accelerator.prepare(model, opt)" in row for row in rows)
    assert any('class="del">' in row and "print(1)" in row for row in rows)


def test_notebooks_are_migrated(project: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Notes"]},
        {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
         "source": ["!echo hi\n", "import torch\n", "model = torch.nn.Linear(2, 1)\n",
                    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n", "print(1)"]},
    ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = write(project, "src/nb.ipynb", (json.dumps(notebook, indent=1) + "\n").encode())
    result = run("src", "--in-place")
    assert result.exit_code == 0, result.output
    converted = json.loads(path.read_text())
    assert converted["cells"][0] == cells[0]
    assert converted["cells"][1]["source"][:2] == ["!echo hi\n", "import torch\n"]
    assert "accelerator.print(1)" in "".join(converted["cells"][1]["source"])
    assert "nb.ipynb:cell_2" in result.stderr  # ACC101: trains in its own process


def test_ctrl_c_while_writing_leaves_whole_files_and_says_which(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import accelify.runtime.files as files

    for name in ("a.py", "b.py", "c.py", "d.py"):
        write(project, f"src/{name}", SCRIPT)
    real_fsync, calls = files.fsync_path, []

    def interrupted_fsync(path: str) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real_fsync(path)

    monkeypatch.setattr(files, "fsync_path", interrupted_fsync)
    result = CliRunner().invoke(main, ["migrate", "--jobs", "1", "--in-place", "src"])
    assert result.exit_code == 130
    assert "interrupted: 2 converted files had been written (each one whole)" in result.stderr
    assert "  src/a.py\n  src/b.py\n" in result.stderr
    src = project / "src"
    assert [(src / n).read_bytes().endswith(CONVERTED_TAIL) for n in ("a.py", "b.py", "c.py", "d.py")] == [True, True, False, False]
    assert sorted(p.name for p in src.iterdir()) == ["a.py", "b.py", "c.py", "d.py"]


@pytest.mark.multiprocess
def test_two_jobs_give_the_same_results_as_one(project: Path) -> None:
    for i in range(12):
        write(project, f"src/s{i}/train.py", SCRIPT)
        write(project, f"src/s{i}/util.py", b"import os\n")
    write(project, "src/helpers.py", HELPERS)
    write(project, "src/a.py", USES_HELPERS)
    write(project, "src/dp.py", REFUSED)
    write(project, "src/bad.py", b"import torch\nx = (\n")
    one = run("src", "--report", "one.json")
    two = CliRunner().invoke(main, ["migrate", "--jobs", "2", "src", "--report", "two.json"], catch_exceptions=False)
    assert one.exit_code == two.exit_code == 2
    first, second = (json.loads((project / n).read_text()) for n in ("one.json", "two.json"))
    assert first["files"] == second["files"] and first["totals"] == second["totals"]


@pytest.mark.multiprocess
def test_sigint_mid_run_exits_130_and_every_file_is_whole(project: Path) -> None:
    """A real SIGINT to a real `accelify migrate --jobs 2 --in-place` over many files."""
    count = 150
    for i in range(count):
        write(project, f"src/train_{i:03d}.py", SCRIPT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from accelify.cli import main; main()", "migrate", "--jobs", "2", "--in-place", "src"],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    src = project / "src"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if sum(p.read_bytes().endswith(CONVERTED_TAIL) for p in src.glob("*.py")) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived")
    assert proc.returncode == 130, err
    written = {line.strip() for line in err.splitlines() if line.startswith("  src/")}
    states = {p.name: p.read_bytes() for p in src.iterdir()}
    assert len(states) == count  # no temporary file left behind
    converted = {f"src/{name}" for name, data in states.items() if data.endswith(CONVERTED_TAIL)}
    assert all(data == SCRIPT or data.endswith(CONVERTED_TAIL) for data in states.values())
    assert converted == written and 0 < len(converted) < count


def test_scripts_that_edit_a_shared_module_differently_fail_one_at_a_time(project: Path) -> None:
    """The same plan as ``convert``: the first script is written with the module, the second fails alone."""
    write(project, "src/helpers.py", SHARED_HELPER)
    write(project, "src/a.py", SHARED_A)
    write(project, "src/b.py", SHARED_B)
    result = run("--in-place", "src")
    assert result.exit_code == 2, result.output
    assert (project / "src" / "b.py").read_bytes() == SHARED_B
    assert "accelerator.prepare" in (project / "src" / "a.py").read_text()
    assert "accelerator.backward(loss)" in (project / "src" / "helpers.py").read_text()
