"""Launched by tests/cli/test_launch_run.py with `accelify launch --cpu -n 2 ...`: asserts inside each worker.

Modes (first argument): ``ok`` checks what a worker sees; ``fail`` makes rank 1 raise while rank 0
waits; ``hang`` makes both wait (the test interrupts the launcher); ``kill`` trains a DDP model and
SIGKILLs rank ``argv[3]`` mid-training, as the out-of-memory killer does (the other rank's Gloo
all-reduce then fails with "Connection reset by peer"); ``disk-full`` makes rank 1's writes fail
with ENOSPC during ``save_state``. Each worker writes its pid to ``<dir>/pid.<rank>`` so the test
can check that none survives the launcher.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from accelify.runtime.launch_settings import LaunchSettings as Settings
from accelify.runtime.launch_settings import load_launch_settings as load_settings

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
elif mode in ("kill", "disk-full"):
    from torch import nn

    from accelify.runtime import Accelerator

    acc = Accelerator(cpu=True)
    net = nn.Linear(8, 8)
    model, optimizer = acc.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1))
    if mode == "disk-full":
        import accelify.runtime.checkpoint.layout as files

        if rank == 1:
            def full_disk(path, obj):
                raise OSError(28, "No space left on device", str(path))

            files.write_state = full_disk
        acc.save_state(os.path.join(out_dir, "ck"))
    victim = int(sys.argv[3]) if mode == "kill" else -1
    for step in range(1000):
        acc.backward(model(torch.randn(4, 8)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        if step == 3 and rank == victim:
            os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("the surviving rank should have been stopped")
dist.destroy_process_group()
