"""Launched on 2 Gloo processes by tests/runtime/test_accumulation.py with ACCELIFY_GRADIENT_ACCUMULATION_STEPS=2.

k=2 micro-batches of b=2 per process must equal one step on the full 2*2*2 batch; gradients are not
all-reduced on the first micro-batch (DDP no_sync); the last batch of the loader always syncs.
Prints "ACCUMULATION-WORKER-OK <rank>".
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import Accelerator, set_seed

acc = Accelerator()  # gradient_accumulation_steps comes from the environment
assert acc.gradient_accumulation_steps == 2 and acc.num_processes == 2
rank = acc.process_index


def same_on_all(t: torch.Tensor) -> bool:
    parts = [torch.empty_like(t) for _ in range(2)]
    dist.all_gather(parts, t.detach().contiguous())
    return torch.equal(parts[0], parts[1])


set_seed(0)
x, y = torch.randn(16, 3), torch.randn(16, 1)
model = nn.Linear(3, 1)
reference = nn.Linear(3, 1)
reference.load_state_dict(model.state_dict())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(x, y), batch_size=2)  # 8 batches -> 4 per process -> 2 optimizer steps
pm, popt, pl = acc.prepare(model, opt, loader)
syncs = []
for i, (bx, by) in enumerate(pl):
    with acc.accumulate(pm):
        loss = nn.functional.mse_loss(pm(bx), by)
        acc.backward(loss)
        syncs.append(acc.sync_gradients)
        if not acc.sync_gradients:
            assert not same_on_all(model.weight.grad), "gradients were all-reduced on an accumulation step"
        else:
            assert same_on_all(model.weight.grad)
        popt.step()
        popt.zero_grad()
assert syncs == [False, True, False, True], syncs

# reference: one optimizer step per 2 micro-batches x 2 processes = 8 samples, in the loader's order
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
order = torch.arange(16).reshape(4, 2, 2)  # [global step][process][sample]: process r gets batches r, r+2, ...
for step in range(2):
    idx = order[2 * step : 2 * step + 2].permute(1, 0, 2).reshape(-1)
    ref_opt.zero_grad()
    nn.functional.mse_loss(reference(x[idx]), y[idx]).backward()
    ref_opt.step()
for p, q in zip(model.parameters(), reference.parameters()):
    assert torch.allclose(p, q, atol=1e-6), (p, q)
assert all(same_on_all(p) for p in model.parameters())

# an odd number of batches: the last one synchronises anyway
odd = acc.prepare(DataLoader(TensorDataset(x[:6], y[:6]), batch_size=1))  # 3 batches per process
syncs = []
for bx, by in odd:
    with acc.accumulate(pm):
        acc.backward(nn.functional.mse_loss(pm(bx), by))
        syncs.append(acc.sync_gradients)
        popt.step()
        popt.zero_grad()
assert syncs == [False, True, True], syncs

# no_sync on its own
with acc.no_sync(pm):
    pm(x[rank : rank + 1]).sum().backward()
assert not same_on_all(model.weight.grad)
acc.end_training()
print(f"ACCUMULATION-WORKER-OK {rank}", flush=True)
