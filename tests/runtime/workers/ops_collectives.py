"""Launched on 2 Gloo processes by tests/runtime/test_ops.py; asserts inside each process."""

from __future__ import annotations

import torch
import torch.distributed as dist

from accelify.runtime import broadcast, broadcast_object_list, gather, gather_object, pad_across_processes, reduce
from accelify.runtime.errors import DistributedOperationException

dist.init_process_group("gloo")
rank = dist.get_rank()

# gather: concatenation along dim 0, 0-d -> 1-d, nested structures, integer and bool dtypes
assert gather(torch.tensor([2 * rank, 2 * rank + 1])).tolist() == [0, 1, 2, 3]
assert gather(torch.tensor(float(rank))).tolist() == [0.0, 1.0]
nested = gather({"a": torch.full((1, 2), rank), "b": (torch.tensor([rank == 0]),)})
assert nested["a"].tolist() == [[0, 0], [1, 1]] and nested["b"][0].tolist() == [True, False]

# reduce: sum / mean / max / min, new tensors, scale
value = torch.tensor([1.0, 4.0]) if rank == 0 else torch.tensor([3.0, 2.0])
assert reduce(value).tolist() == [4.0, 6.0] and value.tolist() == ([1.0, 4.0] if rank == 0 else [3.0, 2.0])
assert reduce(value, "mean").tolist() == [2.0, 3.0]
assert reduce(value, "max").tolist() == [3.0, 4.0] and reduce(value, "min").tolist() == [1.0, 2.0]
assert reduce(torch.tensor(rank + 1), "mean").item() == 1.5
assert reduce({"x": torch.tensor(1.0)}, scale=0.5)["x"].item() == 1.0

# broadcast: in place, from any process, also non-contiguous tensors
t = torch.tensor([1, 2]) if rank == 0 else torch.zeros(2, dtype=torch.int64)
assert broadcast(t) is t and t.tolist() == [1, 2]
u = torch.full((2, 3), rank).t()
broadcast(u, from_process=1)
assert u.tolist() == [[1, 1], [1, 1], [1, 1]]

# pad_across_processes: dim, pad_index, pad_first, nested, too few dimensions
mine = torch.ones(2 + 2 * rank, 3)
padded = pad_across_processes(mine, pad_index=-1)
assert padded.shape == (4, 3) and (rank == 1 or padded[2:].eq(-1).all())
first = pad_across_processes(mine, pad_first=True)
assert rank == 1 or (first[:2].eq(0).all() and first[2:].eq(1).all())
wide = pad_across_processes({"w": torch.ones(3, 2 + 3 * rank)}, dim=1)
assert wide["w"].shape == (3, 5)
assert pad_across_processes(torch.ones(2 + rank), dim=1).shape == (2 + rank,)
assert pad_across_processes(torch.ones(2, 1 + rank), dim=-1).shape == (2, 2)

# objects
assert gather_object([rank, "x"]) == [0, "x", 1, "x"]
assert gather_object(f"p{rank}") == ["p0", "p1"]
objs = ["cfg", {"lr": 3}] if rank == 0 else [None, None]
assert broadcast_object_list(objs) is objs and objs == ["cfg", {"lr": 3}]

# outside debug mode a shape mismatch is still an error on every process, not a crash
try:
    gather(torch.zeros(2 + rank))
except DistributedOperationException as exc:
    text = str(exc)
    assert "Operation: `accelify.runtime.gather`" in text, text
    assert "  - Process 0: [2]\n  - Process 1: [3]" in text, text
else:
    raise AssertionError("gather with different shapes did not raise")
try:
    reduce(torch.zeros(2, dtype=torch.float32 if rank == 0 else torch.float64))
except DistributedOperationException as exc:
    assert "dtype" in str(exc) and "float64" in str(exc), str(exc)
else:
    raise AssertionError("reduce with different dtypes did not raise")
assert gather(torch.tensor([rank])).tolist() == [0, 1]  # the group still works afterwards

dist.barrier()
print(f"OPS-OK rank {rank}")
dist.destroy_process_group()
