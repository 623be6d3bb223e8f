"""WarnUnsupported and ReportLeftovers: what the tool does not convert is never silent."""

from __future__ import annotations

import pytest
from _convert import codes, converted, dedent

from accelify.pipeline import convert_source

HEAD = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import torch.distributed as dist\ndist.init_process_group('nccl')\n" + HEAD, ["ACC003:2"]),
        ("from torch.nn.parallel import DistributedDataParallel as DDP\n" + HEAD + "model = DDP(model)\n", ["ACC004:5"]),
        (
            "from torch.utils.data.distributed import DistributedSampler\n" + HEAD + "s = DistributedSampler(ds)\n",
            ["ACC003:5"],
        ),
    ],
)
def test_manual_distributed_code_stops_the_conversion(code: str, expected: list[str]) -> None:
    result = convert_source(code)
    assert result.status == "attention" and result.new == code
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


def test_every_place_of_manual_distributed_code_is_reported() -> None:
    code = dedent(MANUAL_DDP)
    result = convert_source(code, path="ddp.py")
    assert result.status == "attention" and result.new == code
    assert codes(code) == [
        "ACC003:9",  # dist.init_process_group
        "ACC003:10",  # dist.get_rank()
        "ACC004:11",  # DDP(...)
        "ACC003:12",  # DistributedSampler(...)
        "ACC003:16",  # sampler.set_epoch
        "ACC003:20",  # dist.all_reduce
        "ACC003:21",  # dist.barrier()
        "ACC003:22",  # if rank == 0:
        "ACC003:24",  # if dist.get_rank() == 0: (once, not again for the call in the test)
    ]
    for warning in result.warnings:
        assert "the file was left unchanged" in warning.message and "then convert again" in warning.fix
    texts = [w.format() for w in result.warnings]
    assert texts[0].startswith("ddp.py:9:5: ACC003 manual distributed code (`dist.init_process_group`)")
    assert "`if rank == 0:`" in texts[7] and "accelerator.is_main_process" in texts[7]
    assert "`DDP` wrapping" in texts[2]
    assert "accelerator.wait_for_everyone()" in texts[6] and "accelerator.reduce" in texts[5]


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
