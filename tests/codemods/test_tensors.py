"""PlaceTensors: other tensors sent to CUDA by hand go to accelerator.device."""

from __future__ import annotations

import pytest
from _convert import codes, converted

HEAD = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"

CASES = [
    ("mask = torch.ones(8).cuda()", "mask = torch.ones(8, device=accelerator.device)"),
    ("steps = torch.arange(0, 8, dtype=torch.long).cuda()", "steps = torch.arange(0, 8, dtype=torch.long, device=accelerator.device)"),
    # a random draw keeps the CPU stream of the original: drawn there, then moved
    ("noise = torch.randn(8).cuda()", "noise = torch.randn(8).to(accelerator.device)"),
    ("t = batch_stats.cuda(non_blocking=True)", "t = batch_stats.to(accelerator.device, non_blocking=True)"),
    ("teacher = Teacher().to('cuda')", "teacher = Teacher().to(accelerator.device)"),
    ('w = torch.tensor([1.0, 2.0]).to(torch.device("cuda:0"))', "w = torch.tensor([1.0, 2.0]).to(accelerator.device)"),
    ('z = torch.zeros(3, device="cuda")', "z = torch.zeros(3, device=accelerator.device)"),
]


@pytest.mark.parametrize(("before", "after"), CASES)
def test_other_tensors(before: str, after: str) -> None:
    out = converted(HEAD + before + "\n")
    assert f"\n{after}\n" in out


NEAR_MISSES = [
    "x = y.to(torch.float16)",
    "z = torch.zeros(3, device='cpu')",
    "x = y.to(other)",
]


@pytest.mark.parametrize("code", NEAR_MISSES)
def test_other_tensors_near_misses(code: str) -> None:
    assert f"\n{code}\n" in converted(HEAD + code + "\n")


def test_cuda_with_a_device_index_is_left_and_warned() -> None:
    code = HEAD + "x = y.cuda(1)\n"
    assert "\nx = y.cuda(1)\n" in converted(code)
    assert codes(code) == ["ACC013:4"]


def test_cuda_where_there_is_no_accelerator_is_reported() -> None:
    code = (
        "import torch\ndef helper(x):\n    return x.cuda()\n"
        "def main():\n    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    assert "return x.cuda()" in converted(code)
    assert codes(code) == ["ACC001:3"]


TENSORS_HEAD = HEAD + "def log(msg, device='gpu0'):\n    pass\n"

def test_device_keyword_of_a_function_that_is_not_torch_is_left_and_warned() -> None:
    # `device="cuda"` may be a label to print or compare: it stays, with ACC015 so a function that
    # does place tensors with it is not missed silently
    code = TENSORS_HEAD + 'log("done", device="cuda")\n'
    assert '\nlog("done", device="cuda")\n' in converted(code)
    assert codes(code) == ["ACC015:6"]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # a tensor method and an nn.Module of torch place tensors with their `device=`
        ('y = x.new_zeros(3, device="cuda")', "y = x.new_zeros(3, device=accelerator.device)"),
        ('layer = torch.nn.Linear(2, 2, device="cuda")', "layer = torch.nn.Linear(2, 2, device=accelerator.device)"),
        # guarded by availability: still the process's device
        (
            "if torch.cuda.is_available():\n    w = w.cuda()",
            "w = w.to(accelerator.device)",
        ),
    ],
)
def test_device_keyword_and_guarded_cuda(before: str, after: str) -> None:
    assert f"\n{after}\n" in converted(TENSORS_HEAD + before + "\n")


def test_a_guarded_line_placing_two_tensors_is_unguarded_once() -> None:
    """``if train_on_gpu: inputs, targets = inputs.cuda(), targets.cuda()``: both calls ask to drop the same guard
    (an internal error before)."""
    from accelify.pipeline import convert_source

    code = (
        "import torch\ntrain_on_gpu = torch.cuda.is_available()\n\n\ndef train(net, batches):\n"
        "    opt = torch.optim.Adam(net.parameters())\n    for inputs, targets in batches:\n"
        "        if(train_on_gpu):\n            inputs, targets = inputs.cuda(), targets.cuda()\n"
        "        loss = (net(inputs) - targets).pow(2).mean()\n        loss.backward()\n        opt.step()\n\n\n"
        "train(torch.nn.Linear(1, 1), [(torch.ones(2, 1), torch.ones(2, 1))])\n"
    )
    result = convert_source(code)
    assert result.status == "converted", result.error
    assert "        inputs, targets = inputs.to(accelerator.device), targets.to(accelerator.device)\n" in result.new
