"""The startup-hook folder of ``accelify verify``: put it first on ``PYTHONPATH`` and every Python process started
with ``ACCELIFY_VERIFY_RECORD`` set records what its training does (see ``accelify_verify_recorder.py``).

The plain modules live here, importable by their top-level names when this folder is on the path:
``sitecustomize.py`` (Python's startup hook: activates the recorder, then runs the ``sitecustomize`` it shadows),
``accelify_verify_recorder.py`` (the per-process recording: state, events, the JSON lines, the step limit) and
``accelify_verify_patches.py`` (the patches that route torch into it), with their helpers (exact mode and its summed
losses, names, the sandbox, the stdout line recorder ``accelify_verify_stdout.py``). None imports ``accelify``: they run inside
the user's script, which pays for torch only.
"""

from __future__ import annotations

from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent
"""The folder to put first on ``PYTHONPATH``."""

RECORDER_MODULE = "accelify_verify_recorder"
"""The recorder's module name on that path (the fork server imports it after forking)."""
