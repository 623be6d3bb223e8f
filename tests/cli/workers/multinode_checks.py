"""Launched as one process on each of two "machines" (loopback): checks the global group spans both."""

import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2 and int(os.environ["LOCAL_WORLD_SIZE"]) == 1, (world, os.environ["LOCAL_WORLD_SIZE"])
assert int(os.environ["GROUP_RANK"]) == rank, (os.environ["GROUP_RANK"], rank)  # one process per machine
ranks = [None, None]
dist.all_gather_object(ranks, (rank, sys.argv[1]))
assert sorted(r for r, _ in ranks) == [0, 1], ranks
assert sorted(m for _, m in ranks) == ["machine0", "machine1"], ranks
total = torch.tensor([1.0])
dist.all_reduce(total)
assert total.item() == 2.0
print(f"MULTINODE-OK global rank {rank} on {sys.argv[1]}", flush=True)
dist.destroy_process_group()
