"""WarnUnsupported and ReportLeftovers: what the tool does not convert is never silent."""

from __future__ import annotations

import pytest
from _convert import codes, converted, dedent

from accelify.pipeline import convert_source

HEAD = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


TRAIN = "for x in torch.ones(4, 2):\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()\n"
SETUP = "import torch.distributed as dist\ndist.init_process_group('gloo')\n"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # collectives the accelerator has no counterpart for
        (SETUP + HEAD + TRAIN + "    dist.broadcast(model.weight.data, src=0)\n", ["ACC003:10"]),
        (SETUP + HEAD + TRAIN + "    dist.all_gather([torch.zeros(1)], loss)\n", ["ACC003:10"]),
        # a reduction other than a sum or a mean
        (SETUP + HEAD + TRAIN + "    dist.all_reduce(loss, op=dist.ReduceOp.MAX)\n", ["ACC003:10"]),
        # a barrier only the main process reaches (no pair around a cache)
        (SETUP + HEAD + TRAIN + "    if dist.get_rank() == 0:\n        dist.barrier()\n", ["ACC003:11"]),
        # DDP's gradient toggle outside micro-step accumulation
        (
            SETUP + "from torch.nn.parallel import DistributedDataParallel as DDP\n" + HEAD + "model = DDP(model)\n"
            + "model.require_backward_grad_sync = False\n" + TRAIN,
            ["ACC003:8"],
        ),
        # a set-up branch on the script's own flag that does more than set up
        (
            "import argparse\n" + SETUP.splitlines()[0] + "\nargs = argparse.Namespace(distributed=True, lr=0.1)\n"
            + "if args.distributed:\n    dist.init_process_group('gloo')\n    args.lr = args.lr * dist.get_world_size()\n"
            + HEAD + TRAIN,
            ["ACC003:6"],
        ),
        # processes started by the script itself, with no direct call to copy
        (
            "import torch.multiprocessing as mp\n" + SETUP + HEAD
            + "def worker(rank):\n    pass\nmp.spawn(worker, nprocs=2)\n" + TRAIN,
            ["ACC003:9"],
        ),
        # a DistributedSampler the loader does not receive as a name or an argument
        (
            SETUP + "from torch.utils.data import DataLoader, DistributedSampler\n" + HEAD
            + "samplers = [DistributedSampler(range(8))]\nloader = DataLoader(range(8), sampler=samplers[0])\n"
            + "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n",
            ["ACC003:7"],
        ),
    ],
)
def test_distributed_code_without_a_counterpart_stops_the_conversion(code: str, expected: list[str]) -> None:
    result = convert_source(code)
    assert result.status == "attention" and result.new == code, result.new
    assert codes(code) == expected


MANUAL_DDP = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(2, 1), device_ids=[rank])
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()
            dist.all_reduce(loss)
        dist.barrier()
        if rank == 0:
            print(loss)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
"""


def test_hand_written_ddp_is_converted_to_the_runtime() -> None:
    """Every piece of the hand-written distribution has its counterpart, so the file is converted, with one way of
    being distributed left: process group, DDP, sampler and set_epoch go (and their imports), the rank, the
    barrier, the reduction and the rank tests go through the accelerator, and the save under the rank test is
    the accelerator's (no barrier: only the main process gets there)."""
    result = convert_source(dedent(MANUAL_DDP), path="ddp.py")
    assert result.status == "converted" and result.warnings == ()
    assert result.new == dedent(
        """
        import torch
        from torch.utils.data import DataLoader
        from accelify.runtime import Accelerator


        def main():
            accelerator = Accelerator()
            rank = accelerator.process_index
            model = torch.nn.Linear(2, 1)
            loader = DataLoader(ds, shuffle=True)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt, loader = accelerator.prepare(model, opt, loader)
            for epoch in range(2):
                for x, y in loader:
                    loss = model(x).sum()
                    accelerator.backward(loss)
                    loss = accelerator.reduce(loss)
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    accelerator.print(loss)
                if accelerator.is_main_process:
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "m.pt")
            accelerator.end_training()
        """
    )


def test_every_place_without_a_counterpart_is_reported() -> None:
    code = dedent(
        """
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            opt.step()
            dist.broadcast(model.weight.data, src=0)
            group = dist.new_group([0])
        """
    )
    result = convert_source(code, path="ddp.py")
    assert result.status == "attention" and result.new == code
    assert codes(code) == ["ACC003:9", "ACC003:10"]
    texts = [w.format() for w in result.warnings]
    assert texts[0].startswith("ddp.py:9:5: ACC003 manual distributed code (`dist.broadcast`)")
    assert all("the file was left unchanged" in t and "then convert again" in t for t in texts)


def test_model_parallelism_by_hand_is_refused() -> None:
    code = dedent(
        """
        import torch
        import torch.nn as nn
        class Halves(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(2, 2).to("cuda:0")
                self.b = nn.Linear(2, 1).to("cuda:1")
            def forward(self, x):
                return self.b(self.a(x).to("cuda:1"))
        model = Halves()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            opt.step()
        """
    )
    result = convert_source(code, path="mp.py")
    assert result.status == "attention" and result.new == code
    assert codes(code) == ["ACC023:7"]
    assert "model parallelism" in result.warnings[0].message and "device_placement=False" in result.warnings[0].fix


@pytest.mark.parametrize(
    "code",
    [
        # without a process group, DDP or DistributedSampler these mean something else: no ACC003
        HEAD + "for epoch in range(2):\n    sampler.set_epoch(epoch)\n    loss = model(x).sum()\n    loss.backward()\n",
        HEAD + "rank = 0\nif rank == 0:\n    loss = model(x).sum()\n    loss.backward()\n",
    ],
)
def test_rank_tests_and_set_epoch_alone_do_not_stop_the_conversion(code: str) -> None:
    result = convert_source(code)
    assert result.status == "converted"
    assert not [w for w in result.warnings if w.code in ("ACC003", "ACC004")]


def test_accumulation_without_the_division_is_converted_with_amp() -> None:
    code = dedent(
        """
        import torch
        from torch.cuda.amp import GradScaler, autocast
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = GradScaler()
        for i, (x, y) in enumerate(loader):
            with autocast():
                loss = model(x).sum() / 4
            loss.backward()
            if (i + 1) % 4 == 0:
                opt.step()
        """
    )
    out = converted(code)
    assert "accelerator.backward(loss)" in out and "with accelerator.autocast():" in out
    assert "gradient_accumulation_steps=4" in out and "with accelerator.accumulate(model):" in out
    assert codes(code) == []


def test_accumulation_with_an_else_is_left_with_a_warning() -> None:
    code = dedent(
        """
        import torch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i, (x, y) in enumerate(loader):
            loss = model(x).sum() / 4
            loss.backward()
            if (i + 1) % 4 == 0:
                opt.step()
            else:
                print("accumulating")
        """
    )
    assert "accelerator.accumulate" not in converted(code)
    assert codes(code) == ["ACC006:7"]


def test_warning_format() -> None:
    result = convert_source(HEAD + "x = y.cuda(2)\n", path="train.py")
    (warning,) = result.warnings
    assert warning.format() == (
        "train.py:4:5: ACC013 `.cuda(2)` names a device index "
        "(use `.to(accelerator.device)`; each process already has its own device)"
    )


def test_leftover_cuda_in_an_unconverted_file_is_reported() -> None:
    code = "import torch\nx = torch.ones(2).cuda()\n"
    assert convert_source(code).status == "unchanged"
    assert codes(code) == ["ACC001:2"]
