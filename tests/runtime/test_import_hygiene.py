"""`import accelify.runtime` pays only for torch: no libcst/click/rich, no side effects."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import json, logging, os, sys, warnings
    # torch (and the parts of it the runtime uses) add their own loggers and warning filters: baseline
    import torch, torch.distributed, torch.nn.parallel, torch.optim, torch.utils.data

    def snapshot():
        return {
            "env": dict(os.environ),
            "hooks": [repr(h) for h in (sys.excepthook, sys.gettrace(), sys.getprofile())] + [len(sys.meta_path), len(sys.path_hooks)],
            "root_handlers": [repr(h) for h in logging.getLogger().handlers],
            "loggers_with_handlers": sorted(
                n for n, v in logging.root.manager.loggerDict.items() if getattr(v, "handlers", None)
            ),
            "warning_filters": [repr(f) for f in warnings.filters],
            "tool_modules": sorted(m for m in sys.modules if m.split(".")[0] in ("libcst", "click", "rich")),
        }

    reports = []
    for statement in STATEMENTS:
        before = snapshot()
        exec(statement)
        after = snapshot()
        reports.append([statement, sorted(k for k in before if before[k] != after[k]), after["tool_modules"]])
    print(json.dumps(reports))
    """
)
STATEMENTS = [
    "import accelify.runtime",
    "from accelify.runtime import Accelerator",
    "from accelify.runtime import PartialState, set_seed, DistributedDataParallelKwargs, AcceleratedOptimizer",
    "from accelify.runtime import AcceleratedScheduler, AutocastKwargs, GradientState, ProcessInfo",
]


@pytest.mark.multiprocess
def test_runtime_import_is_clean(clean_env) -> None:  # type: ignore[no-untyped-def]
    """Each import changes no environment variable, hook, handler or warning filter, and loads no tool module."""
    code = PROBE.replace("STATEMENTS", repr(STATEMENTS))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env(None))
    assert proc.returncode == 0, proc.stderr
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    assert reports == [[statement, [], []] for statement in STATEMENTS], reports


@pytest.mark.multiprocess
def test_runtime_import_costs_little_more_than_torch(clean_env) -> None:  # type: ignore[no-untyped-def]
    """Measured in one process with -X importtime: everything after torch <= 0.2x torch itself."""
    code = "import torch; from accelify.runtime import Accelerator; Accelerator"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=120, env=clean_env(None)
    )
    assert proc.returncode == 0, proc.stderr
    torch_us = extra_us = 0
    after_torch = False
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        name = name[1:]  # one space after the bar; more means nested
        if name.startswith(" "):
            continue  # nested: counted in its top-level parent
        if name == "torch":
            torch_us, after_torch = int(cumulative), True
        elif after_torch:
            extra_us += int(cumulative)
    assert torch_us > 0
    assert extra_us <= 0.2 * torch_us, f"accelify.runtime adds {extra_us} us on top of torch's {torch_us} us"
