"""Launched on 2 Gloo processes by tests/runtime/test_accelerator.py; every check asserts inside the worker.

Usage: accelerator_worker.py OUT_DIR. Prints "ACCELERATOR-WORKER-OK <rank>" at the end.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import (
    AcceleratedOptimizer,
    AcceleratedScheduler,
    Accelerator,
    DataLoaderShard,
    DistributedType,
    InitProcessGroupKwargs,
    PartialState,
    UnusedParametersError,
    set_seed,
)

out = Path(sys.argv[1])


@atexit.register  # registered before the Accelerator's own exit handler, so it runs after it
def _group_closed_at_exit() -> None:
    print(f"GROUP-OPEN-AT-EXIT {dist.is_initialized()}", flush=True)


acc = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=60))])  # cpu=False on purpose
rank = acc.process_index


def allsame(t: torch.Tensor) -> bool:
    parts = [torch.empty_like(t) for _ in range(2)]
    dist.all_gather(parts, t.detach().contiguous())
    return torch.equal(parts[0], parts[1])


# -- process state: never a silent single-process fallback ------------------------------------
assert acc.num_processes == 2 and acc.use_distributed
assert acc.distributed_type == DistributedType.MULTI_CPU
assert rank == int(os.environ["RANK"]) and acc.local_process_index == int(os.environ["LOCAL_RANK"])
assert acc.device == torch.device("cpu")
assert acc.is_main_process == (rank == 0) and acc.is_last_process == (rank == 1)
assert acc.is_local_main_process == (rank == 0)
assert dist.is_initialized() and dist.get_world_size() == 2
assert PartialState().num_processes == 2 and PartialState().process_index == rank

# -- prepare: order, passthrough, twice is harmless, gradients synchronised ----------------------
set_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
reference = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
reference.load_state_dict(model.state_dict())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
loader = DataLoader(torch.arange(10.0), batch_size=3)
pm, none, popt, ploader, psched, extra = acc.prepare(model, None, opt, loader, sched, "text")
assert isinstance(pm, nn.parallel.DistributedDataParallel) and acc.unwrap_model(pm) is model
assert none is None and extra == "text"
assert isinstance(popt, AcceleratedOptimizer) and isinstance(ploader, DataLoaderShard)
assert isinstance(psched, AcceleratedScheduler)
assert acc.prepare(pm) is pm and acc.prepare(popt) is popt and acc.prepare(ploader) is ploader
assert popt.param_groups[0]["params"][0] is model[0].weight

gen = torch.Generator().manual_seed(1)
data = torch.randn(2, 6, 4, generator=gen)
target = torch.randn(2, 6, 1, generator=gen)
loss = nn.functional.mse_loss(pm(data[rank]), target[rank])  # different data on each rank
popt.zero_grad()
acc.backward(loss)
norm = acc.clip_grad_norm_(pm.parameters(), 1e9)
assert allsame(norm.reshape(1))
popt.step()
psched.step()
assert all(allsame(p) for p in model.parameters()), "weights differ across ranks after one step"
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
nn.functional.mse_loss(reference(data.reshape(12, 4)), target.reshape(12, 1)).backward()
ref_opt.step()
for p, q in zip(model.parameters(), reference.parameters()):
    assert torch.allclose(p, q, atol=1e-6), "DDP step differs from the full-batch step"
# the schedule advances once per process per step (Accelerate's semantics)
assert psched.scheduler.last_epoch == 2, psched.scheduler.last_epoch

# -- collectives through the Accelerator -----------------------------------------------------
g = acc.gather(torch.tensor([rank, rank]))
assert g.tolist() == [0, 0, 1, 1]
assert acc.reduce(torch.tensor(float(rank + 1))).item() == 3.0
assert acc.pad_across_processes(torch.ones(rank + 1)).shape == (2,)
seen, objs = [], []
for batch in ploader:
    seen += acc.gather_for_metrics(batch).tolist()
    objs += acc.gather_for_metrics([f"s{int(v)}" for v in batch])
assert sorted(seen) == [float(i) for i in range(10)], seen
assert sorted(objs) == sorted(f"s{i}" for i in range(10)), objs
# a loader of full batches only (codemods/rules/full_batches.py): 11 samples in batches of 4 keep the 8 of the two
# full batches; 12 keep all 12, the last round completed by a duplicate batch that gather_for_metrics drops
for total, kept in ((11, 8), (12, 12)):
    cut = acc.prepare(DataLoader(TensorDataset(torch.arange(float(total))), batch_size=4, sampler=range(total // 4 * 4)))
    seen = [v for (batch,) in cut for v in acc.gather_for_metrics(batch).tolist()]
    assert sorted(seen) == [float(i) for i in range(kept)], (total, seen)

# -- coordination ------------------------------------------------------------------------------
marker = out / "first.txt"
with acc.main_process_first():
    if rank == 0:
        time.sleep(0.3)
        marker.write_text("main")
    else:
        assert marker.read_text() == "main"
acc.wait_for_everyone()
acc.print("PRINTED-ONCE")
calls = []
acc.on_main_process(lambda: calls.append("main"))()
acc.on_last_process(lambda: calls.append("last"))()
acc.on_process(lambda: calls.append("p1"), process_index=1)()
acc.on_local_main_process(lambda: calls.append("local"))()
assert calls == (["main", "local"] if rank == 0 else ["last", "p1"]), calls
with acc.split_between_processes(["a", "b", "c"]) as part:
    assert part == (["a", "b"] if rank == 0 else ["c"])
with acc.split_between_processes(["a", "b", "c"], apply_padding=True) as part:
    assert part == (["a", "b"] if rank == 0 else ["c", "c"])
with acc.split_between_processes({"x": [1, 2, 3, 4], "y": (5, 6, 7, 8)}) as part:
    assert part == ({"x": [1, 2], "y": (5, 6)} if rank == 0 else {"x": [3, 4], "y": (7, 8)})
with acc.split_between_processes(torch.arange(5), apply_padding=True) as part:
    assert part.tolist() == ([0, 1, 2] if rank == 0 else [3, 4, 4])

if rank == 1:
    acc.set_trigger()
assert acc.check_trigger() is True
assert acc.check_trigger() is False
if rank == 0:
    acc.set_breakpoint()
assert acc.check_breakpoint() is True

acc.save({"rank": rank}, out / "saved.pt")
acc.save_model(pm, out / "model")
acc.wait_for_everyone()
assert torch.load(out / "saved.pt")["rank"] == 0
assert sorted(os.listdir(out / "model")) == ["model.safetensors"]
if rank == 0:
    from safetensors.torch import load_file

    loaded = load_file(out / "model" / "model.safetensors")
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())

# -- several accelerators in one process, bf16 really applied on the CPU -----------------------
bf = Accelerator(mixed_precision="bf16")
assert bf.num_processes == 2 and bf.mixed_precision == "bf16" and acc.mixed_precision == "no"
inner_dtypes = []
m2 = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
m2[0].register_forward_hook(lambda mod, a, o: inner_dtypes.append(o.dtype))
pm2 = bf.prepare(m2)
y = pm2(torch.randn(3, 4))
assert y.dtype == torch.float32 and inner_dtypes == [torch.bfloat16], (y.dtype, inner_dtypes)
bf.backward(y.sum())
assert type(bf.unwrap_model(pm2).forward).__name__ == "AutocastForward" and bf.unwrap_model(pm2) is m2
assert type(bf.unwrap_model(pm2, keep_fp32_wrapper=False).forward).__name__ == "method"

# -- the unused-parameter error names the parameters and the fix -------------------------------
class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(2, 2)
        self.unused = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


branchy = acc.prepare(Branchy())
branchy(torch.ones(1, 2)).sum().backward()
try:
    branchy(torch.ones(1, 2))
except UnusedParametersError as exc:
    text = str(exc)
    assert "unused.weight" in text and "unused.bias" in text, text
    assert "DistributedDataParallelKwargs(find_unused_parameters=True)" in text, text
else:
    raise AssertionError("DDP's unused-parameter error was not raised")

# -- a prepared model forwards the attributes and methods it does not own to the module ----------
class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(2, 2)
        self.saved_actions: list[int] = []
        self.rewards: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.body(z) * 2


policy = Policy()
pp = acc.prepare(policy)
assert isinstance(pp, nn.parallel.DistributedDataParallel)
assert torch.equal(pp.decode(torch.ones(1, 2)), policy.decode(torch.ones(1, 2)))
pp.saved_actions.append(3)
pp.rewards = [1.0]  # the module's own attribute: written there, where its methods read it
assert policy.saved_actions == [3] and policy.rewards == [1.0] and "rewards" not in pp.__dict__
assert pp.body is policy.body and pp.module is policy
pp.train(False)
assert pp.training is False and policy.training is False
policy.std = 0.5  # a plain attribute the script deletes before saving the module (PPO's scheduler object)
del pp.std
assert not hasattr(policy, "std")
pp.note = "on the wrapper"  # a new attribute stays on the wrapper, as on any object
assert pp.note == "on the wrapper" and not hasattr(policy, "note")
try:
    pp.no_such_attribute
except AttributeError as exc:
    assert "no_such_attribute" in str(exc)
else:
    raise AssertionError("a missing attribute did not raise AttributeError")

acc.end_training()
# end_training leaves the group up (prepared DDP models still use it) and collectives keep working.
assert dist.is_initialized() and acc.reduce(torch.tensor([1.0]), reduction="sum").item() == 2.0
print(f"ACCELERATOR-WORKER-OK {rank}", flush=True)
