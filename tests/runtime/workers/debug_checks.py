"""Launched on 2 Gloo processes with ACCELIFY_DEBUG_MODE=1 by tests/runtime/test_debug.py.

The process group has a 3-second timeout so a check that fails to catch a mismatch ends the run
instead of hanging the suite.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from accelify.runtime import PartialState, broadcast, gather, pad_across_processes
from accelify.runtime.errors import DistributedOperationException
from accelify.runtime.ops import named_operation

dist.init_process_group("gloo", timeout=timedelta(seconds=3))
rank = dist.get_rank()
assert PartialState().debug, "ACCELIFY_DEBUG_MODE=1 should turn debug mode on"


def expect_error(call, *fragments):
    try:
        call()
    except DistributedOperationException as exc:
        text = str(exc)
        for fragment in fragments:
            assert fragment in text, f"{fragment!r} not in:\n{text}"
        return text
    raise AssertionError(f"no DistributedOperationException; expected {fragments}")


# the shape-mismatch message, in Hugging Face Accelerate's form, plus each process's call site
line = sys._getframe().f_lineno + 2
text = expect_error(
    lambda: broadcast(torch.zeros(1, 5) if rank == 0 else torch.zeros(1, 2, 5)),
    "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n\n"
    "Operation: `accelify.runtime.broadcast`\nInput shapes:\n  - Process 0: [1, 5]\n  - Process 1: [1, 2, 5]",
    f"debug_checks.py:{line}\n",
)
assert text.startswith("Cannot apply desired operation")

# compatible calls go through in debug mode
assert gather(torch.tensor([rank])).tolist() == [0, 1]
assert pad_across_processes(torch.ones(2 + 2 * rank, 3)).shape == (4, 3)
expect_error(lambda: pad_across_processes(torch.ones(2, 3 + rank)), "`accelify.runtime.pad_across_processes`", "[2, 4]")
with named_operation("Accelerator.gather_for_metrics"):
    expect_error(lambda: gather({"x": torch.ones(2 + rank)}), "`Accelerator.gather_for_metrics`", "{'x': [3]}")

# processes in different collectives: each one's operation and file:line
line = sys._getframe().f_lineno + 2
if rank == 0:
    call = lambda: gather(torch.ones(1))  # noqa: E731
else:
    call = lambda: PartialState().wait_for_everyone()  # noqa: E731
expect_error(
    call,
    "Processes entered different collective operations",
    "Process 0: `accelify.runtime.gather` at ",
    f"debug_checks.py:{line}\n",
    "Process 1: `wait_for_everyone` at ",
    f"debug_checks.py:{line + 2}\n",
)
assert gather(torch.tensor([rank])).tolist() == [0, 1]  # still in step afterwards
print(f"DEBUG-CHECKS-OK rank {rank}", flush=True)

# a process that never arrives: named after the timeout instead of a hang
if rank == 0:
    started = time.monotonic()
    expect_error(lambda: gather(torch.ones(1)), "Process(es) 1 never reached `accelify.runtime.gather`", "0:00:03")
    assert time.monotonic() - started < 30
    print("DEBUG-TIMEOUT-OK", flush=True)
    dist.distributed_c10d._get_default_store().set("worker/done", "1")
else:  # stay away from the collective (but alive) until process 0 has reported it
    dist.distributed_c10d._get_default_store().wait(["worker/done"], timedelta(seconds=60))
