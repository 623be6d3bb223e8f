"""Launched by tests/gpu/test_multi_gpu.py with ``accelify launch --multi_gpu -n N`` (N = every visible GPU).

Each process checks NCCL, its device, DDP through ``prepare``, sharded pinned loaders, CUDA collectives and a
checkpoint round trip, and trains next to a plain one-GPU reference that sees every process's batch: after the
same steps the DDP model must hold the reference's weights. Results: ``<report dir>/rank<N>.json``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from report import Report
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import Accelerator
from accelify.runtime.devices import process_device, process_group_backend, read_device_facts

TOL = {"rtol": 1e-4, "atol": 1e-5}
STEPS, BATCH = 6, 8


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def main(folder: Path) -> None:
    acc = Accelerator()
    report = Report(str(folder), acc.process_index)
    world, rank, local = acc.num_processes, acc.process_index, acc.local_process_index

    def process_group() -> str:
        assert world >= 2 and world == dist.get_world_size(), (world, dist.get_world_size())
        backend = str(dist.get_backend())
        assert "nccl" in backend and "nccl" in str(acc.state.backend), (backend, acc.state.backend)
        assert acc.distributed_type.value == "MULTI_GPU", acc.distributed_type
        return f"{world} processes, backend {backend}"

    def device_per_process() -> str:
        facts = read_device_facts()
        assert acc.device == torch.device("cuda", local), acc.device
        assert torch.cuda.current_device() == local, torch.cuda.current_device()
        assert process_device(facts, cpu=False, local_rank=local, world_size=world) == ("cuda", local), facts
        assert process_group_backend(facts, cpu=False) == "cpu:gloo,cuda:nccl", facts
        return f"process {rank}: {acc.device} ({torch.cuda.get_device_name(local)}); the decisions from {facts}"

    samples = world * BATCH * STEPS
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(samples, 16, generator=g), torch.randint(0, 4, (samples,), generator=g),
                         torch.arange(samples))
    model, ref = make_model(), make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ref = ref.to(acc.device)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    model, optimizer, loader = acc.prepare(model, optimizer, DataLoader(data, batch_size=BATCH, pin_memory=True))

    def ddp_through_prepare() -> str:
        assert isinstance(model, nn.parallel.DistributedDataParallel), type(model)
        assert model.device_ids == [local] and model.output_device == local, (model.device_ids, model.output_device)
        assert all(p.device == acc.device for p in model.parameters())
        assert all(p.device == acc.device for g in optimizer.param_groups for p in g["params"])
        return f"DistributedDataParallel(device_ids=[{local}]), optimizer on the same parameters"

    seen: list[torch.Tensor] = []

    def trains_like_one_process() -> str:
        loss_fn = nn.CrossEntropyLoss()
        for x, y, index in loader:
            assert x.device == acc.device and y.device == acc.device, (x.device, y.device)
            seen.append(index)
            loss = loss_fn(model(x), y)
            acc.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            every_x, every_y = acc.gather((x, y))  # the global batch, in rank order: the reference's batch
            ref_loss = loss_fn(ref(every_x), every_y)
            ref_loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
        for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
            assert torch.allclose(p, q, **TOL), (name, (p - q).abs().max().item())
        return f"{len(seen)} steps of DDP on {world} GPUs = the same steps on one GPU with the global batch"

    def data_sharded_and_pinned() -> str:
        assert loader.pin_memory, "pin_memory=True was dropped on a GPU run"
        everyone = acc.gather(torch.cat(seen)).tolist()
        assert sorted(everyone) == list(range(samples)), "samples duplicated or lost across processes"
        return f"{samples} samples, {samples // world} per process, batches pinned and on {acc.device}"

    def parameters_agree() -> str:
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        rows = acc.gather(flat.unsqueeze(0))
        assert all(torch.equal(rows[0], row) for row in rows), "the processes' parameters differ"
        return f"{flat.numel()} parameters equal on {world} processes"

    def collectives() -> str:
        t = torch.tensor([float(rank)], device=acc.device)
        assert acc.gather(t).tolist() == [float(r) for r in range(world)]
        assert acc.reduce(t + 1, "sum").item() == world * (world + 1) / 2
        padded = acc.pad_across_processes(torch.ones(rank + 1, device=acc.device))
        assert padded.shape[0] == world and padded.device == acc.device
        from accelify.runtime import broadcast, gather_object

        assert broadcast(t.clone(), from_process=0).item() == 0.0
        assert gather_object([f"r{rank}"]) == [f"r{r}" for r in range(world)]
        acc.wait_for_everyone()
        return "gather, reduce, pad_across_processes, broadcast, gather_object, wait_for_everyone on CUDA tensors"

    def checkpoint_round_trip() -> str:
        saved = copy.deepcopy(model.module.state_dict())
        acc.save_state(folder / "state")
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        acc.load_state(folder / "state")
        for name, tensor in model.module.state_dict().items():
            assert tensor.device == acc.device and torch.equal(tensor, saved[name]), name
        return f"save_state/load_state on {world} GPUs: weights back on each process's own GPU"

    for name, check in [("process group", process_group), ("device per process", device_per_process),
                        ("DDP through prepare", ddp_through_prepare), ("trains like one process", trains_like_one_process),
                        ("data sharded and pinned", data_sharded_and_pinned), ("parameters agree", parameters_agree),
                        ("collectives", collectives), ("checkpoint round trip", checkpoint_round_trip)]:
        report.check(name, check)
    report.write()
    acc.end_training()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
