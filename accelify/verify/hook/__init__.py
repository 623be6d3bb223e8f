"""The startup-hook folder of ``accelify verify``: put it first on ``PYTHONPATH`` and every Python process started
with ``ACCELIFY_VERIFY_RECORD`` set records what its training does (see ``accelify_verify_recorder.py``).

The plain modules live here, importable by their top-level names when this folder is on the path:
``sitecustomize.py`` (Python's startup hook: activates the recorder, then runs the ``sitecustomize`` it shadows),
``accelify_verify_recorder.py`` (the per-process recording: state, events, the JSON lines, the step limit) with its
parts (``_loaders``: loader events; ``_names``: script places and variable names; ``_fingerprint``: parameters),
``accelify_verify_patches.py`` (the patches that route torch into it), the value recorders (``_stdout``: printed
lines; ``_logged``: trackers and logging; ``_returns``: epoch-level return values), exact mode (``_exact``, its
shared draws ``_draws``, summed losses ``_sums`` with the original's losses read as written ``_reference``,
reduced sums of per-batch means ``_epochsums``, gathers of a padded batch's shares ``_gathered``) and the sandbox.
None imports ``accelify``: they run inside the user's script, which pays for torch only (the recorder falls back to
the package's names only where the tool itself imports it, for its variables' names).
"""

from __future__ import annotations

from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent
"""The folder to put first on ``PYTHONPATH``."""

RECORDER_MODULE = "accelify_verify_recorder"
"""The recorder's module name on that path (the fork server imports it after forking)."""
