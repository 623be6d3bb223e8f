"""What each process of ``accelify launch`` runs: the user's script, plus failure recording.

``python -m accelify.launch.worker script.py args...`` (or ``-m module args...``) runs the
script as ``python script.py args...`` would: ``__name__ == "__main__"``, ``sys.argv`` and
``sys.path[0]`` as usual. If it raises, the traceback is written to torch elastic's error file
(``TORCHELASTIC_ERROR_FILE``) so that the launcher can say which rank failed first and show
its last lines; the traceback is then printed as ``python script.py`` would print it (without
this bootstrap's and runpy's frames), with exit code 1.
Nothing is imported before the script runs, so a launch costs what a plain run costs. A script that ends
without ever joining a process group leaves a marker for the launcher (:mod:`accelify.launch.joined`).
"""

from __future__ import annotations

import os
import runpy
import sys
from types import TracebackType

from accelify.launch import joined as launch_joined


def _record(exc: BaseException) -> None:
    """Write ``exc`` to the elastic error file, when the launcher asked for one."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return
    try:
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        ErrorHandler().record_exception(exc)
    except Exception:  # recording must never hide the user's own error
        pass


def _user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading entries in this bootstrap and runpy: the traceback starts in the user's code."""
    here = os.path.abspath(__file__)
    while tb is not None and (tb.tb_frame.f_globals.get("__name__") == "runpy"
                              or os.path.abspath(tb.tb_frame.f_code.co_filename) == here):
        tb = tb.tb_next
    return tb


def _run_notebook(path: str) -> None:
    """Run a notebook's code cells as ``__main__`` (``accelify.notebook.runnable_program``); a traceback shows the
    program's lines (registered with linecache under the notebook's name)."""
    import linecache
    import types

    from accelify.notebook import read_notebook, runnable_program

    code, _ = runnable_program(read_notebook(path)[0], path)
    linecache.cache[path] = (len(code), None, code.splitlines(True), path)
    module = types.ModuleType("__main__")  # functions the cells define pickle as __main__.name, as in Jupyter
    sys.modules["__main__"] = module
    exec(compile(code, path, "exec"), module.__dict__)


def main(argv: list[str]) -> None:
    """Run ``argv`` (``[script, *args]`` or ``["-m", module, *args]``) as ``__main__``."""
    if not argv or argv == ["-m"]:
        raise SystemExit("usage: python -m accelify.launch.worker (script.py | -m module) [args...]")
    as_module = argv[0] == "-m"
    target, args = (argv[1], argv[2:]) if as_module else (argv[0], argv[1:])
    launch_joined.watch()
    try:
        if as_module:
            sys.argv = [target, *args]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif target.endswith(".ipynb"):
            sys.argv = [target, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            _run_notebook(target)
        else:
            sys.argv = [target, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _record(exc)
        else:
            launch_joined.note_if_alone(os.environ.get("ACCELIFY_LAUNCH_CONFIG"))
        raise
    except BaseException as exc:
        _record(exc)
        raise
    launch_joined.note_if_alone(os.environ.get("ACCELIFY_LAUNCH_CONFIG"))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as error:  # as `python script.py` shows it: the user's frames only, exit code 1
        trimmed = _user_traceback(error.__traceback__)  # None: nothing of the user's ran (module not found)
        sys.excepthook(type(error), error.with_traceback(trimmed), trimmed)
        sys.exit(1)
