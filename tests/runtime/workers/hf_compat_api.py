"""The user-facing API a converted script uses, run under either library (``--lib accelify|accelerate``).

Launched on 2 Gloo processes by tests/runtime/test_hf_compat.py, once per library. Checks that must hold
on every process are asserted here; rank 0 prints one line ``HF_COMPAT_RESULT <json>`` with the observed
results so the test can compare the two libraries field by field. Only the import differs between the runs.
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--lib", choices=("accelify", "accelerate"), required=True)
parser.add_argument("--out", required=True, help="a directory for accelerator.save")
args = parser.parse_args()

if args.lib == "accelify":
    from accelify.runtime import Accelerator, gather_object
else:
    from accelerate import Accelerator
    from accelerate.utils import gather_object

MARKER = "HF_COMPAT_RESULT"
results: dict[str, object] = {}

# -- construction (cpu=True: HF Accelerate stays single-process on CPU without it) ------------------
accelerator = Accelerator(cpu=True)
rank = accelerator.process_index
results["num_processes"] = accelerator.num_processes
results["distributed_type"] = str(accelerator.distributed_type).split(".")[-1]
results["device_type"] = accelerator.device.type  # HF says cpu:<rank>, we say cpu: same device
results["is_main_process"] = gather_object([accelerator.is_main_process])
results["is_last_process"] = gather_object([accelerator.is_last_process])
assert accelerator.num_processes == 2, accelerator.num_processes


def batches_seen(loader: DataLoader) -> list[list[list[int]]]:
    """Every process's batches, rank by rank: ``[[rank 0 batches], [rank 1 batches]]``."""
    mine = [b.tolist() for b in loader]
    return gather_object([mine])


# -- sharded batches and len() per process ---------------------------------------------------------
for bs in (2, 3):
    loader = accelerator.prepare(DataLoader(list(range(10)), batch_size=bs))
    results[f"batches_bs{bs}"] = batches_seen(loader)
    results[f"len_bs{bs}"] = gather_object([len(loader)])

# -- gather_for_metrics drops the duplicated samples of the last batch ---------------------------
for bs in (2, 3):
    loader = accelerator.prepare(DataLoader(list(range(10)), batch_size=bs))
    seen = []
    plain = []
    for batch in loader:
        seen.extend(accelerator.gather_for_metrics(batch).tolist())
        plain.extend(accelerator.gather(batch).tolist())
    results[f"gather_for_metrics_bs{bs}"] = seen
    results[f"gather_bs{bs}"] = plain
    objs = []
    for batch in loader:  # non-tensor data goes through gather_object and is trimmed the same way
        objs.extend(accelerator.gather_for_metrics([f"s{i}" for i in batch.tolist()], use_gather_object=True))
    results[f"gather_for_metrics_objects_bs{bs}"] = objs

# -- gather / reduce / pad_across_processes on plain tensors ---------------------------------------
t = torch.tensor([float(rank + 1), float(10 * (rank + 1))])
results["gather"] = accelerator.gather(t).tolist()
results["gather_scalar"] = accelerator.gather(torch.tensor(rank + 5)).tolist()
results["gather_nested"] = {k: v.tolist() for k, v in accelerator.gather({"a": t, "b": t * 2}).items()}
results["reduce_sum"] = accelerator.reduce(t.clone(), reduction="sum").tolist()
results["reduce_mean"] = accelerator.reduce(t.clone(), reduction="mean").tolist()
ragged = torch.arange(1, rank + 3)  # rank 0: [1, 2]; rank 1: [1, 2, 3]
results["pad"] = accelerator.gather(accelerator.pad_across_processes(ragged)).tolist()
results["pad_first"] = accelerator.gather(accelerator.pad_across_processes(ragged, pad_index=-1, pad_first=True)).tolist()

# -- split_between_processes ----------------------------------------------------------------------
with accelerator.split_between_processes(list(range(5))) as part:
    results["split"] = gather_object([part])
with accelerator.split_between_processes(list(range(5)), apply_padding=True) as part:
    results["split_padded"] = gather_object([part])
with accelerator.split_between_processes({"a": [1, 2, 3, 4], "b": torch.arange(4)}) as part:
    results["split_dict"] = gather_object([{"a": part["a"], "b": part["b"].tolist()}])

# -- print once, set_trigger / check_trigger --------------------------------------------------------
accelerator.print("HF_COMPAT_PRINT_ONCE")
if rank == 1:
    accelerator.set_trigger()
results["trigger"] = [accelerator.check_trigger(), accelerator.check_trigger()]  # reset after a check

# -- a training loop: prepare, backward, clip_grad_norm_, step, scheduler ---------------------------
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 2, generator=g))
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
raw_model = model
model, optimizer, train_loader, scheduler = accelerator.prepare(
    model, optimizer, DataLoader(data, batch_size=4), scheduler
)
losses, norms, lrs = [], [], []
for x, y in train_loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 0.5)))
    optimizer.step()
    scheduler.step()
    losses.append(float(accelerator.reduce(loss.detach(), reduction="mean")))
    lrs.append(scheduler.get_last_lr()[0])
results["train_len"] = len(train_loader)
results["train_losses"] = losses
results["train_grad_norms"] = norms
results["train_lrs"] = lrs
unwrapped = accelerator.unwrap_model(model)
assert unwrapped is raw_model, type(unwrapped)
results["unwrap_type"] = type(unwrapped).__name__
weights = torch.cat([p.detach().flatten() for p in unwrapped.parameters()])
everyone = accelerator.gather(weights[None])
assert torch.equal(everyone[0], everyone[1]), f"weights differ across ranks: {everyone}"
results["train_weights"] = weights.tolist()

# -- save on the main process only; wait_for_everyone ------------------------------------------------
out = Path(args.out)
accelerator.save(unwrapped.state_dict(), out / f"model_{rank}.pt")
accelerator.wait_for_everyone()
results["saved_files"] = sorted(p.name for p in out.iterdir())
reloaded = torch.load(out / "model_0.pt", weights_only=True)
assert torch.equal(reloaded["weight"], unwrapped.weight.detach()), "saved weights differ"
accelerator.wait_for_everyone()

# -- gradient accumulation with accumulate() -----------------------------------------------------
accelerator.gradient_accumulation_steps = 2
torch.manual_seed(0)
model2 = torch.nn.Linear(4, 2)
raw_model2 = model2
optimizer2 = torch.optim.SGD(model2.parameters(), lr=0.1)
scheduler2 = torch.optim.lr_scheduler.StepLR(optimizer2, step_size=2, gamma=0.5)
model2, optimizer2, acc_loader, scheduler2 = accelerator.prepare(
    model2, optimizer2, DataLoader(data, batch_size=3), scheduler2  # 16 samples each -> 6 batches, last one short
)
syncs, acc_weights, acc_lrs, acc_norms = [], [], [], []
for x, y in acc_loader:
    with accelerator.accumulate(model2):
        loss = torch.nn.functional.mse_loss(model2(x), y)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            acc_norms.append(float(accelerator.clip_grad_norm_(model2.parameters(), 0.5)))
        optimizer2.step()
        scheduler2.step()
        optimizer2.zero_grad()
    syncs.append(accelerator.sync_gradients)
    acc_weights.append(float(raw_model2.weight.detach().sum()))
    acc_lrs.append(scheduler2.get_last_lr()[0])
final2 = torch.cat([p.detach().flatten() for p in raw_model2.parameters()])
everyone2 = accelerator.gather(final2[None])
assert torch.equal(everyone2[0], everyone2[1]), f"accumulated weights differ across ranks: {everyone2}"
results["acc_len"] = len(acc_loader)
results["acc_sync_gradients"] = syncs
results["acc_weight_sums"] = acc_weights
results["acc_lrs"] = acc_lrs
results["acc_grad_norms"] = acc_norms
results["acc_weights"] = final2.tolist()

accelerator.wait_for_everyone()
if accelerator.is_main_process:
    print(MARKER, json.dumps(results, sort_keys=True), flush=True)
# Free the DDP models before the process group goes (Accelerate's end_training destroys it): a DDP model
# outliving its Gloo group made torch 2.13 abort the process at exit now and then ("terminate called
# without an active exception"), under Accelerate as under any script that leaves them to the teardown.
del model, model2, optimizer, optimizer2, scheduler, scheduler2
accelerator.free_memory()
gc.collect()
accelerator.end_training()
