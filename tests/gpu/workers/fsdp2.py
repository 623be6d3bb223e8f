"""Launched by tests/gpu/test_multi_gpu.py with ``accelify launch --multi_gpu --use_fsdp -n 2``: FSDP2 on 2 GPUs.

The launch's ``--use_fsdp`` reaches the ``Accelerator`` through the launch file; ``prepare`` shards the model
with ``fully_shard`` over NCCL. It trains next to an unsharded reference on the same GPU that sees both
processes' batches: clipped norms, weights (gathered with ``get_state_dict``), ``save_state``/``load_state``
with the optimizer's moments, and a bf16 run must agree. Results: ``<report dir>/rank<N>.json``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from report import Report
from torch import nn
from torch.distributed.tensor import DTensor

from accelify.runtime import Accelerator
from accelify.runtime import fsdp

TOL = {"rtol": 1e-4, "atol": 1e-5}


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))


def batch(step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 16, generator=g).to(device), torch.randn(8, 4, generator=g).to(device)


def main(folder: Path) -> None:
    acc = Accelerator()
    report = Report(str(folder), acc.process_index)
    rank, world = acc.process_index, acc.num_processes
    model, ref = make_model(), make_model().to(acc.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    model, optimizer = acc.prepare(model, optimizer)

    def step_both(step: int) -> None:
        x, y = batch(step, acc.device)
        mine = slice(rank * 8 // world, (rank + 1) * 8 // world)
        acc.backward(nn.functional.mse_loss(model(x[mine]), y[mine]))
        norm = acc.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        optimizer.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
        ref_opt.zero_grad()
        assert torch.allclose(norm.to(ref_norm.device), ref_norm, **TOL), (step, norm, ref_norm)

    def weights_match() -> None:
        full = acc.get_state_dict(model)
        if acc.is_main_process:
            for name, tensor in ref.state_dict().items():
                assert torch.allclose(full[name].to(tensor.device), tensor, **TOL), name
        else:
            assert full == {}, sorted(full)

    def sharded_by_prepare() -> str:
        assert world == 2 and acc.distributed_type.value == "FSDP", (world, acc.distributed_type)
        assert fsdp.is_fsdp_module(model)
        params = list(model.parameters())
        assert all(isinstance(p, DTensor) and p.to_local().device == acc.device for p in params)
        assert params[0].to_local().shape == (128, 16), params[0].to_local().shape  # half of (256, 16) here
        assert [id(p) for g in optimizer.param_groups for p in g["params"]] == [id(p) for p in params]
        return f"fully_shard over NCCL: each of the 2 GPUs holds half of every weight on {acc.device}"

    def trains_like_one_gpu() -> str:
        for step in range(4):
            step_both(step)
        weights_match()
        return "4 AdamW steps with clipping: norms and gathered weights equal an unsharded reference's"

    def checkpoint_round_trip() -> str:
        acc.save_state(folder / "state")
        ref_saved, ref_opt_saved = copy.deepcopy(ref.state_dict()), copy.deepcopy(ref_opt.state_dict())
        step_both(4)
        acc.load_state(folder / "state")
        ref.load_state_dict(ref_saved)
        ref_opt.load_state_dict(ref_opt_saved)
        weights_match()
        for step in (4, 5):  # the same steps again: Adam's moments came back too
            step_both(step)
        weights_match()
        return "save_state/load_state of the sharded model and optimizer, then the same steps again"

    def bf16() -> str:
        bf = Accelerator(mixed_precision="bf16")
        net = make_model()
        net_opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net, net_opt = bf.prepare(net, net_opt)
        losses = []
        for step in range(3):
            x, y = batch(step, bf.device)
            out = net(x)
            assert out.dtype == torch.float32, out.dtype
            loss = nn.functional.mse_loss(out, y)
            bf.backward(loss)
            net_opt.step()
            net_opt.zero_grad()
            losses.append(loss.item())
        assert all(torch.isfinite(torch.tensor(losses))), losses
        return f"bf16 autocast over FSDP2: losses {['%.4f' % v for v in losses]}"

    for name, check in [("sharded by prepare", sharded_by_prepare), ("trains like one GPU", trains_like_one_gpu),
                        ("checkpoint round trip", checkpoint_round_trip), ("bf16", bf16)]:
        report.check(name, check)
    report.write()
    acc.end_training()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
