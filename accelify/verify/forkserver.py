"""A fork server for runs of scripts: they start as fresh processes that have imported torch already.

``python script.py`` spends about 2 s of CPU importing torch before the script's first line; a small training
script's own work is a fraction of that. The server pays the imports once, then forks one child per run. Each child
is a new process in its own session: it takes the job's working directory, environment, argv, ``sys.path[0]`` and
output files, activates the verify recorder when the job's environment asks for it (the startup hook cannot: this
interpreter started long ago), runs the script (or ``-m`` module) as ``__main__`` and exits with its exit code, as
``python script.py`` would. Nothing a script creates exists in the server or leaks into the next child.

The server is this file run as a program (``python forkserver.py``; of accelify it imports only the runtime a
converted script imports, ``accelify.runtime``'s accelerator, whose modules import nothing of the tool, so children
start with a clean ``sys.modules`` apart from torch and that runtime: 0.4 s of imports saved in each converted run,
three per verification). Protocol, one JSON object per line: the client writes a job
``{"target", "module", "args", "cwd", "env", "stdout", "stderr", "timeout", "hook_dir"}``, the server answers
``{"returncode", "timed_out", "pid"}``. At the timeout the server sends the child SIGUSR1 (the recorder dumps every
thread's Python stack), waits a second, then kills the child's whole session. The server is single-threaded and
never starts a thread pool or a process group, so forking it is safe.

A job with ``"ranks"`` (a list of ``{"env", "stdout", "stderr"}`` overlays) starts one child per rank, as
torch.distributed.run would (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` in each overlay; rank 0's
process group hosts the store): the answer's ``returncode`` is the first failing rank's (0 when all succeed),
``returncodes`` every rank's. As torchrun does, when a rank fails the others are stopped (after a grace period for
their own error reports); at the timeout every rank is asked for its stacks, then killed. This is for test suites:
it saves torchrun's agent and each worker's torch import; users' runs go through torch.distributed.run.

:class:`ForkServer` is the client; it runs one job at a time (start several for parallel runs).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

STACK_SIGNAL = signal.SIGUSR1
STACK_WAIT = 1.0  # seconds a timed-out child gets to write its stacks before it is killed
PRELOAD = ("torch", "torch._dynamo", "torch.optim", "torch.distributed", "numpy", "accelify.runtime.accelerator",
           "accelify.runtime.ops")


# -- the server (runs as its own program) -------------------------------------------------------------------------
def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(job: Mapping[str, Any]) -> None:
    """Become the script: never returns."""
    code = 1
    try:
        os.setsid()
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(0, closefd=False)
        # sys.path as a fresh `python script.py` (or `-m`) has it: the script's folder first, then PYTHONPATH's hook
        first = job["cwd"] if job.get("module") else os.path.dirname(os.path.abspath(job["target"]))
        sys.path[:0] = [first, *([job["hook_dir"]] if job.get("hook_dir") else [])]
        if job.get("hook_dir") and job["env"].get("ACCELIFY_VERIFY_RECORD"):
            importlib.import_module("accelify_verify_recorder").install_from_environment()
        sys.argv = [job["target"], *job["args"]]
        try:
            if job.get("module"):
                runpy.run_module(job["target"], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(job["target"], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)  # as the interpreter reports it (the recorder sees it)
            code = 1
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


FAILURE_GRACE = 5.0  # seconds the other ranks get after one failed, before they are stopped (torchrun waits too)


def _run(job: Mapping[str, Any]) -> dict[str, Any]:
    if job.get("ranks"):
        return _run_ranks(job)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(job)
    deadline = time.monotonic() + float(job.get("timeout", 300))
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": False, "pid": pid}
        if time.monotonic() > deadline:
            _end(pid)
            return {"returncode": None, "timed_out": True, "pid": pid}
        time.sleep(0.01)


def _run_ranks(job: Mapping[str, Any]) -> dict[str, Any]:
    """One child per rank; wait for all, stop the rest when one fails, end them all at the timeout."""
    sys.stdout.flush()
    sys.stderr.flush()
    pids = []
    for overlay in job["ranks"]:
        rank_job = {**job, "env": {**job["env"], **overlay["env"]}, "stdout": overlay["stdout"], "stderr": overlay["stderr"]}
        pid = os.fork()
        if pid == 0:
            _child(rank_job)
        pids.append(pid)
    codes: dict[int, int] = {}
    deadline = time.monotonic() + float(job.get("timeout", 300))
    stop_at: float | None = None
    while len(codes) < len(pids):
        for pid in pids:
            if pid in codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[pid] = os.waitstatus_to_exitcode(status)
                if codes[pid] != 0 and stop_at is None:
                    stop_at = time.monotonic() + FAILURE_GRACE
        now = time.monotonic()
        if now > deadline:
            _end_all([pid for pid in pids if pid not in codes])  # every rank's stacks first, then the kills
            return {"returncode": None, "timed_out": True, "pid": pids[0], "pids": pids}
        if stop_at is not None and now > stop_at:
            for pid in pids:
                if pid not in codes:
                    try:
                        os.killpg(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.01)
    returncodes = [codes[pid] for pid in pids]
    first = next((c for c in returncodes if c != 0), 0)
    return {"returncode": first, "returncodes": returncodes, "timed_out": False, "pid": pids[0], "pids": pids}


def _end_all(pids: list[int]) -> None:
    """Ask every process for its stacks, wait once, then kill their sessions (a killed rank would make the
    others fail before they were asked)."""
    for pid in pids:
        try:
            os.kill(pid, STACK_SIGNAL)
        except ProcessLookupError:
            pass
    time.sleep(STACK_WAIT * 2)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)


def _end(pid: int) -> None:
    """Ask ``pid`` for its stacks, then kill its session (the script and any worker it started)."""
    try:
        os.kill(pid, STACK_SIGNAL)
    except ProcessLookupError:
        pass
    time.sleep(STACK_WAIT)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def main() -> None:
    """Import torch once, say ready, then run one job per line of stdin."""
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # this folder's modules (records, report, ...) must not shadow anything a script imports
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    # What the server imported lives as long as it does: move it out of the collector's view, so that a child's
    # collections (automatic ones, and the runtime's gc.collect() at exit) do not walk, and copy on write, the
    # ~280k objects of torch's import (0.5 s a collection in each forked rank).
    gc.freeze()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(_run(json.loads(line))), flush=True)


# -- the client -----------------------------------------------------------------------------------------------------
class ForkServerError(RuntimeError):
    """The fork server died or did not start."""


class ForkServer:
    """One fork server process: :meth:`run` forks a child for a job and waits for it (one job at a time)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=dict(env),
        )
        ready = self.proc.stdout.readline()  # type: ignore[union-attr]
        if "ready" not in ready:
            raise ForkServerError(f"the verify fork server did not start (exit {self.proc.poll()}): {ready!r}")

    def run(self, *, target: str, args: Sequence[str], cwd: Path, env: Mapping[str, str], stdout: Path,
            stderr: Path, timeout: float, module: bool = False, hook_dir: Path | None = None,
            ranks: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Run ``target`` as ``python target args`` (``-m target`` with ``module``) would; the server's reply.
        With ``ranks`` (``{"env", "stdout", "stderr"}`` per rank), one process per rank."""
        job = {"target": target, "module": module, "args": list(args), "cwd": str(cwd), "env": dict(env),
               "stdout": str(stdout), "stderr": str(stderr), "timeout": timeout,
               "hook_dir": str(hook_dir) if hook_dir is not None else None,
               "ranks": [{"env": dict(r["env"]), "stdout": str(r["stdout"]), "stderr": str(r["stderr"])} for r in ranks]}
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            raise ForkServerError(f"the verify fork server died (exit {self.proc.poll()})") from None
        reply = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not reply:
            raise ForkServerError(f"the verify fork server died (exit {self.proc.poll()})")
        return json.loads(reply)

    def close(self) -> None:
        """Stop the server (it finishes the job it is running first)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


if __name__ == "__main__":
    main()
