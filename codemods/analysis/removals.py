"""Removing files every process would remove: ``os.remove(file)`` of the checkpoints a script saved (Diego999/pyGAT
saves ``{epoch}.pkl`` each epoch, then globs ``*.pkl`` and removes the older ones).

A file the main process saved (``accelerator.save``, a write the writes rule keeps to the main process) exists once;
removed by every process, the second removal fails (``FileNotFoundError``) or races the first. A removal of a path
every process names alike (not a file of each process's own, made with its rank) is a file write like the others:
``rules/writes.py`` runs it on the main process only, where it is a statement of its own with no collective in its
arguments.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.facts import CallSite

REMOVERS = {"os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree"}
_PATH_METHODS = ("unlink", "rmdir")  # ``Path(p).unlink(missing_ok=True)``


def removes_shared_file(agreement: Agreement, site: CallSite) -> bool:
    """Whether ``site`` removes a file or folder whose path every process names alike (``os.remove(file)``,
    ``shutil.rmtree(run_dir)``, ``Path(p).unlink()``)."""
    qualname = site.qualname or ""
    if qualname in REMOVERS:
        paths = [a.value for a in site.node.args[:1]]
    elif site.method in _PATH_METHODS and not qualname.startswith("os.") and isinstance(site.node.func, cst.Attribute):
        paths = [site.node.func.value]
    else:
        return False
    return bool(paths) and all(agreement.uniform(site.scope, p, site.stmt) for p in paths)
