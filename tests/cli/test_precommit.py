"""The hooks of .pre-commit-hooks.yaml, run by the real pre-commit on a temporary git repository.

pre-commit clones the hook repository (a git repository made here from this checkout's package
files, so uncommitted work is what is tested) and installs it with pip into an environment of its
own, resolving the dependencies from the configured package indexes (on this project's machines, the
local index, and PyPI for what it lacks). That first install is timed, and must not bring torch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "accelify", "codemods", "runtime")
SCRIPT = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nprint(1)\n"
INSTALL_BUDGET_S = 300  # generous: a loaded 2-core machine; the time is printed either way

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def hook_repository(where: Path) -> tuple[Path, str]:
    """A git repository holding this checkout's package files, committed; its path and commit."""
    where.mkdir()
    for name in PACKAGE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, where / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, where / name)
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "accelify")
    return where, git(where, "rev-parse", "HEAD").strip()


def pre_commit(repo: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRE_COMMIT", "VIRTUAL_ENV"))}
    env.update(PRE_COMMIT_HOME=str(home), PRE_COMMIT_COLOR="never", GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)


def test_hooks_refuse_an_unconverted_script_fix_it_and_leave_excluded_files_alone(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    hooks, rev = hook_repository(tmp_path / "hooks")
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.accelify]\nexclude = ["legacy/"]\n')
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {hooks}\n"
        f"    rev: {rev}\n"
        "    hooks:\n"
        "      - id: accelify-check\n"
        "      - id: accelify-fix\n"
        "        stages: [manual]\n"
    )
    (repo / "train.py").write_text(SCRIPT)
    (repo / "legacy").mkdir()
    (repo / "legacy" / "old.py").write_text(SCRIPT)
    (repo / "util.py").write_text("def f():\n    return 1\n")
    home = tmp_path / "pre-commit-home"

    start = time.perf_counter()
    installed = pre_commit(repo, home, "install-hooks")
    seconds = time.perf_counter() - start
    print(f"\npre-commit first install of the hook environment: {seconds:.1f} s")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert seconds < INSTALL_BUDGET_S
    assert not list(home.glob("*/py_env-*/lib/python*/site-packages/torch")), "the hook environment has torch"
    assert list(home.glob("*/py_env-*/lib/python*/site-packages/libcst"))

    assert pre_commit(repo, home, "install").returncode == 0
    git(repo, "add", "-A")
    refused = subprocess.run(["git", "commit", "-m", "add training"], cwd=repo, capture_output=True, text=True,
                             env={**os.environ, "PRE_COMMIT_HOME": str(home), "GIT_AUTHOR_NAME": "t",
                                  "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                                  "GIT_COMMITTER_EMAIL": "t@example.com"})
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "accelify (check)" in output and "Failed" in output
    assert "--- a/train.py" in output and "+from accelify.runtime import Accelerator" in output
    assert "legacy/old.py" not in output

    fixed = pre_commit(repo, home, "run", "--hook-stage", "manual", "accelify-fix", "--all-files")
    assert fixed.returncode == 1, fixed.stdout  # pre-commit fails a hook that modified files
    assert "files were modified by this hook" in fixed.stdout
    assert "from accelify.runtime import Accelerator" in (repo / "train.py").read_text()
    assert (repo / "legacy" / "old.py").read_text() == SCRIPT  # excluded: not touched
    assert (repo / "util.py").read_text() == "def f():\n    return 1\n"

    git(repo, "add", "-A")
    passed = pre_commit(repo, home, "run", "accelify-check", "--all-files")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    committed = subprocess.run(["git", "commit", "-m", "converted"], cwd=repo, capture_output=True, text=True,
                               env={**os.environ, "PRE_COMMIT_HOME": str(home), "GIT_AUTHOR_NAME": "t",
                                    "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                                    "GIT_COMMITTER_EMAIL": "t@example.com"})
    assert committed.returncode == 0, committed.stdout + committed.stderr
