"""Launched on 2 Gloo processes by tests/runtime/test_data_loader.py; asserts inside each process."""

from __future__ import annotations

import random

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset, Sampler

from accelify.runtime import gather, gather_object, prepare_data_loader, skip_first_batches

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2


def lists(loader):
    return [b.tolist() for b in loader]


# the documented examples, with the process group deciding the shard
assert lists(prepare_data_loader(DataLoader(range(10), batch_size=2))) == [
    [[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]
][rank]
assert lists(prepare_data_loader(DataLoader(range(10), batch_size=3))) == [
    [[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9, 0, 1]]
][rank]
assert lists(prepare_data_loader(DataLoader(range(8), batch_size=4), split_batches=True)) == [
    [[0, 1], [4, 5]], [[2, 3], [6, 7]]
][rank]

# end-of-data flag + remainder: what gather_for_metrics does gives back exactly the dataset
loader = prepare_data_loader(DataLoader(torch.arange(10), batch_size=3))
collected = []
for batch in loader:
    everything = gather(batch)
    if loader.end_of_dataloader:
        everything = everything[: len(everything) - loader.remainder]
    collected += everything.tolist()
assert loader.remainder == 2 and collected == list(range(10)), collected


# shuffled: processes seeded differently still share one permutation (process 0's, drawn as the original)
def check_shared_permutation(build, seeds_differ=True):
    torch.manual_seed(100 + (rank if seeds_differ else 0))
    prepared = prepare_data_loader(build(rank))
    epochs = [lists(prepared) for _ in range(2)]
    torch.manual_seed(100)
    original = build(0)
    plain = [lists(original) for _ in range(2)]
    everyone = gather_object([epochs])
    for e in range(2):
        mine0, mine1 = everyone[0][e], everyone[1][e]
        interleaved = [b for pair in zip(mine0, mine1) for b in pair]
        real = [i for b in plain[e] for i in b]
        got = [i for b in interleaved for i in b]
        assert got[: len(real)] == real, (got, real)  # disjoint parts of the original permutation
    assert everyone[0][0] != everyone[0][1]  # a new permutation each epoch


check_shared_permutation(lambda r: DataLoader(range(20), batch_size=3, shuffle=True))
check_shared_permutation(lambda r: DataLoader(range(20), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7 + r)))


class RandPerm(Sampler[int]):
    def __iter__(self):
        return iter(torch.randperm(12).tolist())

    def __len__(self) -> int:
        return 12


check_shared_permutation(lambda r: DataLoader(range(12), batch_size=2, sampler=RandPerm()))

# with one process per rank's seed, rank 0 consumed the global RNG exactly like the original loader
torch.manual_seed(5)
lists(DataLoader(range(9), batch_size=2, shuffle=True))
expected_state = torch.get_rng_state()
torch.manual_seed(5)
lists(prepare_data_loader(DataLoader(range(9), batch_size=2, shuffle=True)))
assert torch.equal(torch.get_rng_state(), expected_state)


# iterable datasets
class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(7))


assert lists(prepare_data_loader(DataLoader(Stream(), batch_size=2))) == [[[0, 1], [4, 5]], [[2, 3], [6, 0]]][rank]

# rng_types synchronise the named generators from process 0 at each epoch
torch.manual_seed(rank)
random.seed(rank)
synced = prepare_data_loader(DataLoader(range(4), batch_size=1), rng_types=["torch", "python"])
next(iter(synced))
values = gather_object([(torch.rand(1).item(), random.random())])
assert values[0] == values[1], values

# resume in the middle of a shuffled epoch on both processes
torch.manual_seed(3 + rank)
live = prepare_data_loader(DataLoader(range(30), batch_size=2, shuffle=True))
lists(live)
seen = []
for i, batch in enumerate(live):
    seen.append(batch.tolist())
    if i == 2:
        saved, rng = live.state_dict(), torch.get_rng_state()
torch.manual_seed(1000)
again = prepare_data_loader(DataLoader(range(30), batch_size=2, shuffle=True))
torch.set_rng_state(rng)
again.load_state_dict(saved)
assert lists(skip_first_batches(again, saved["batches_yielded"])) == seen[3:]

dist.barrier()
print(f"DATA-SHARDING-OK rank {rank}")
dist.destroy_process_group()
