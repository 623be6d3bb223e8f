"""Launched by tests/cli/test_launch_run.py with `accelify launch --cpu -n 2 ...`: asserts inside each worker.

Modes (first argument): ``ok`` checks what a worker sees; ``fail`` makes rank 1 raise while rank 0
waits; ``hang`` makes both wait (the test interrupts the launcher). Each worker writes its pid to
``<dir>/pid.<rank>`` so the test can check that none survives the launcher.
"""

import os
import sys
import time

import torch
import torch.distributed as dist

from accelify.runtime.settings import Settings, load_settings

mode, out_dir = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
with open(os.path.join(out_dir, f"pid.{rank}"), "w") as fh:
    fh.write(str(os.getpid()))

if mode == "ok":
    assert __name__ == "__main__"
    assert world == 2 and dist.get_backend() == "gloo", (world, dist.get_backend())
    assert sys.argv[3:] == ["--lr", "0.5", "--debug", "-n", "5"], sys.argv
    assert sys.path[0] == os.path.dirname(os.path.abspath(__file__)), sys.path[0]
    settings = load_settings()
    expected = Settings(mixed_precision="bf16", gradient_accumulation_steps=2, debug=True, cpu=True)
    assert settings == expected, settings
    assert os.environ["OMP_NUM_THREADS"] == "1"
    from accelify.runtime import Accelerator

    acc = Accelerator()  # takes the launcher's settings from the launch file
    assert (acc.num_processes, acc.process_index, acc.device.type) == (2, rank, "cpu"), acc
    assert (acc.mixed_precision, acc.gradient_accumulation_steps, acc.state.debug) == ("bf16", 2, True), acc
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    assert total.item() == 3.0, total
    print(f"LAUNCH-OK rank {rank} LAUNCH-FILE {os.environ['ACCELIFY_LAUNCH_CONFIG']}", flush=True)
elif mode == "fail":
    if rank == 1:
        raise ValueError("boom from rank 1")
    time.sleep(120)
elif mode == "hang":
    dist.barrier()
    time.sleep(120)
dist.destroy_process_group()
