"""Launched by tests/runtime/test_debug.py with `accelify launch --cpu -n 2 --debug`: a process leaves early.

``exit``: both gather (a checked collective), then process 0 waits in ``wait_for_everyone`` while
process 1 ends its script. Process 0 must raise at once (the process-group timeout is the default
30 minutes), naming process 1, the collective and both call sites; it prints how long it waited,
then lets the error end it. ``die``: process 1 is SIGKILLed instead while process 0 waits; the
launcher must stop process 0 and name process 1.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

from accelify.runtime import Accelerator
from accelify.runtime.errors import ProcessMissingError

mode = sys.argv[1]
acc = Accelerator(cpu=True)
assert acc.state.debug, "--debug should turn debug mode on"
rank = acc.process_index
assert acc.gather(torch.tensor([rank])).tolist() == [0, 1]  # GATHER-LINE
if rank == 0:
    started = time.monotonic()
    try:
        acc.wait_for_everyone()  # WAIT-LINE
    except ProcessMissingError as exc:
        print(f"EARLY-EXIT-SECONDS {time.monotonic() - started:.2f}", flush=True)
        raise
    raise AssertionError("process 0 passed a barrier process 1 never reached")
elif mode == "die":
    time.sleep(1)  # process 0 is waiting by now
    os.kill(os.getpid(), signal.SIGKILL)
else:
    time.sleep(1)  # process 0 is waiting by now: its wait must end when this process exits
print("PROCESS-1-DONE", flush=True)
