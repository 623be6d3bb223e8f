"""Shared test plumbing: the ``--update-goldens`` flag and a launcher for multi-process checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite corpus expected.py files from the current conversion instead of comparing",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA; run on a GPU machine")
    for item in items:
        # the marker itself, not ``"gpu" in item.keywords``: keywords hold the path's folder names too, and a
        # checkout under a folder called gpu/ would skip every test
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


# Where a test that starts a process must say so: everywhere (codemods start none, and must not).
_MARKED_DIRS = ("tests/",)


# Where the session's verification pool starts early (see ``_verification_pool_beside``): tests that change no
# process-wide state a run inherits (environment variables, the working directory) and start no process themselves.
_POOL_STARTS_BESIDE = "tests/codemods/"
_POOL_WANTED = pytest.StashKey[bool]()


@pytest.fixture
def _verification_pool_beside(request: pytest.FixtureRequest) -> None:
    """Where a selected test needs the verification pool, start it at the first codemod test, so that its two
    workers run beside the one-thread codemod tests (which leave the second core idle) instead of after them, while
    the first test that reads a result waits. Not earlier: cli tests set variables the runs would inherit
    (XDG_CONFIG_HOME, SLURM_*). The pool's fork servers start here, before the process guard is on."""
    if not request.node.nodeid.startswith(_POOL_STARTS_BESIDE):
        return
    session = request.session
    if _POOL_WANTED not in session.stash:  # the items are read once a session, not at each codemod test
        session.stash[_POOL_WANTED] = any("verification_pool" in getattr(item, "fixturenames", ())
                                          for item in session.items)
    if session.stash[_POOL_WANTED]:
        request.getfixturevalue("verification_pool")


@pytest.fixture(autouse=True)
def _starting_a_process_needs_the_marker(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, _verification_pool_beside: None
) -> None:
    """Fail a test that starts a Python process, a multiprocessing process
    or a fork without ``@pytest.mark.multiprocess``: ``pytest -m "not multiprocess"`` must stay the fast loop."""
    node = request.node
    if node.get_closest_marker("multiprocess") or not node.nodeid.startswith(_MARKED_DIRS):
        return

    def refuse(what: str) -> None:
        pytest.fail(f"{node.nodeid} starts a process ({what}) without @pytest.mark.multiprocess; mark it so that "
                    "`pytest -m 'not multiprocess'` stays the fast loop", pytrace=False)

    real_init = subprocess.Popen.__init__

    def popen(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)  # type: ignore[call-overload]
        program = os.fsdecode(argv[0]) if argv else ""
        if program == sys.executable or os.path.basename(program).startswith("python"):
            refuse(" ".join(os.fsdecode(a) for a in argv[:3])[:120])
        real_init(self, args, *rest, **kwargs)  # type: ignore[arg-type]

    import multiprocessing.process

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", lambda self: refuse("multiprocessing"))
    monkeypatch.setattr(os, "fork", lambda: refuse("os.fork"))


def _clean_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_"))}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


RunDistributed = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def run_distributed() -> RunDistributed:
    """Run ``script`` on ``nproc`` local Gloo processes via ``torch.distributed.run --standalone``.

    Fails the test with every worker's output when the launch exits non-zero (unless ``check=False``).
    ``--standalone`` picks a free port, so tests may run side by side.
    """

    def run(
        script: str | Path,
        *args: str,
        nproc: int = 2,
        env: dict[str, str] | None = None,
        timeout: float = 180,
        check: bool = True,
        launcher_args: Sequence[str] = (),
        cwd: str | Path | None = None,
    ) -> subprocess.CompletedProcess:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", *launcher_args, str(script), *args,
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=_clean_env(env), cwd=cwd or ROOT
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
            )
        return proc

    return run


@pytest.fixture
def clean_env() -> Callable[[dict[str, str] | None], dict[str, str]]:
    """The environment a launched child should get: no inherited accelify/accelerate/torchrun variables."""
    return _clean_env


@pytest.fixture(scope="session")
def verification_pool(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The session's one pool of verify runs (``tests/verification_pool.py``), with every case the selected tests
    ask for queued at once: a test parametrised by ``name`` needs that corpus case, by ``planted`` that planted one."""
    from verification_pool import VerificationPool

    corpus: dict[str, None] = {}
    planted: dict[str, None] = {}
    for item in request.session.items:
        if "verification_pool" not in getattr(item, "fixturenames", ()) or not hasattr(item, "callspec"):
            continue
        params = item.callspec.params
        if "name" in params:
            corpus[params["name"]] = None
        if "planted" in params:
            planted[params["planted"]] = None
    pool = VerificationPool()
    pool.start(corpus, planted)
    yield pool
    pool.close()
