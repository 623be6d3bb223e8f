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
        (HEAD + "model = torch.nn.DataParallel(model)\n", ["ACC004:4"]),
        (
            "from torch.utils.data.distributed import DistributedSampler\n" + HEAD + "s = DistributedSampler(ds)\n",
            ["ACC003:5"],
        ),
    ],
)
def test_manual_distributed_code_stops_the_conversion(code: str, expected: list[str]) -> None:
    result = convert_source(code)
    assert result.status == "unchanged" and result.new == code
    assert codes(code) == expected


def test_amp_and_accumulation_are_converted_around_with_warnings() -> None:
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
    assert "accelerator.backward(loss)" in out
    assert codes(code) == ["ACC005:5", "ACC005:7", "ACC006:10"]


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
