"""``accelify verify``: prove that a converted script trains like the original, and trains as data-parallel.

>>> from accelify.verify import VerifyOptions, verify_script
>>> report = verify_script("train.py", options=VerifyOptions(steps=3, args=("--epochs", "1")))  # doctest: +SKIP
>>> report.passed, report.first_failure  # doctest: +SKIP

The layout, one job per module: ``hook/`` (the startup-hook folder: the recorder that runs inside the script's
processes), ``runner`` (one process, or N through torch.distributed.run; timeouts and stack dumps),
``forkserver`` (one-process runs forked from a server that imported torch once), ``records`` (what the recorder
wrote, read back), ``compare`` (``torch.allclose`` on fingerprints; where a hung process waits), ``equivalence``,
``distributed`` and ``exactness`` (records -> checks; ``exactness`` compares the N-process run, in exact mode, with
the original step by step), ``report`` (the frozen report and its JSON), ``workspace`` (a script and
its local modules, converted and written out), ``verification`` (the whole sequence).
"""

from accelify.verify.report import CheckResult, RunSummary, VerifyOptions, VerifyReport, write_report
from accelify.verify.runner import ForkServerLauncher, Launcher
from accelify.verify.verification import verify_files, verify_script
from accelify.verify.workspace import ScriptFiles, convert_files

__all__ = [
    "CheckResult", "ForkServerLauncher", "Launcher", "RunSummary", "ScriptFiles", "VerifyOptions", "VerifyReport",
    "convert_files", "verify_files", "verify_script", "write_report",
]
