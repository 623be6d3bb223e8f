"""A fork server for the end-to-end tests: run scripts as fresh processes that start with torch already imported.

Starting ``python script.py`` costs about 2 s of CPU before the script's first line does anything useful (importing
torch, then torch._dynamo, which the first optimizer pulls in); the corpus scripts' own work is a few hundredths of a
second. This server pays the imports once, then forks one child per script run. Each child is a new process, runs
the script as ``__main__`` with its own argv, working directory, environment and stdout/stderr files, and exits with
the script's exit code, exactly as ``python script.py`` would; nothing the script creates (an Accelerator, a process
group, RNG state) exists in the server or leaks into the next child.

Protocol (one JSON object per line): the client writes a job ``{"script", "args", "cwd", "env", "stdout", "stderr",
"timeout"}`` (file paths for the two streams); the server forks a child for it, waits, and answers
``{"returncode": n}`` (-9 for a child killed at the timeout). The server is single-threaded and never initialises a
thread pool or a process group, so forking is safe. It runs one-process jobs only: multi-process runs go through
torch.distributed.run, whose agent hosts the rendezvous store as it does for users.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback



def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(job: dict) -> None:
    """Become the script: never returns."""
    code = 1
    try:
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
        sys.argv = [job["script"], *job["args"]]
        sys.path[0] = os.path.dirname(os.path.abspath(job["script"]))
        try:
            runpy.run_path(job["script"], run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _run(job: dict) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(job)
    deadline = time.monotonic() + float(job.get("timeout", 180))
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -9
        time.sleep(0.01)


def main() -> None:
    # Paid once here, inherited by every child: torch, and torch._dynamo, which the first optimizer imports.
    for module in ("torch", "torch._dynamo", "torch.optim"):
        importlib.import_module(module)
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        returncode = _run(json.loads(line))
        print(json.dumps({"returncode": returncode}), flush=True)


if __name__ == "__main__":
    main()
