"""ShapeFromGather: tensors gathered for metrics are shaped by their own size after the gather."""

from __future__ import annotations

import pytest
from _convert import codes, converted

HEAD = (
    "import argparse\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "p = argparse.ArgumentParser()\np.add_argument('--batch-size', type=int, default=4)\nargs = p.parse_args()\n"
    "loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=args.batch_size)\n"
    "model = torch.nn.Linear(4, 4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for (x,) in loader:\n    torch.nn.functional.mse_loss(model(x), x).backward()\n    optimizer.step()\n"
    "with torch.no_grad():\n    for (x,) in loader:\n        recon = model(x)\n"
)


@pytest.mark.parametrize(
    "use, expected",
    [
        ("        grid = recon.view(args.batch_size, 1, 2, 2)[:2]\n", "recon.view(-1, 1, 2, 2)[:2]"),
        ("        grid = recon.reshape(args.batch_size, 2, 2)\n", "recon.reshape(-1, 2, 2)"),
        # a name made from the gathered tensor after the gather
        ("        out = recon.cpu()\n        grid = out.view(args.batch_size, 1, 2, 2)\n", "out.view(-1, 1, 2, 2)"),
        # the loader's own batch size argument
        ("        grid = torch.cat([x.view(args.batch_size, 4), recon])\n", "x.view(-1, 4)"),
    ],
)
def test_the_batch_dimension_follows_the_gather(use: str, expected: str) -> None:
    new = converted(HEAD + use)
    assert "gather_for_metrics" in new and expected in new, new


@pytest.mark.parametrize(
    "use",
    [
        "        grid = recon.view(recon.size(0), 1, 2, 2)\n",  # its own size already
        "        grid = recon.view(2, 2, 2, 2)\n",  # not the batch size
        "        grid = torch.ones(8).view(args.batch_size, 2)\n",  # not a gathered tensor
    ],
)
def test_near_misses(use: str) -> None:
    new = converted(HEAD + use)
    assert use.strip() in new and "ACC033" not in " ".join(codes(HEAD + use))


def test_a_second_minus_one_is_reported() -> None:
    code = HEAD + "        flat = recon.view(args.batch_size, -1)\n"
    assert "recon.view(args.batch_size, -1)" in converted(code)
    assert codes(code) == ["ACC033:16"]


ROWS = HEAD.replace("recon = model(x)\n", "recon = model(x)\n        correct = recon.argmax(1)\n")


def test_a_loop_over_the_batch_rows_walks_the_gathered_rows() -> None:
    new = converted(ROWS + "        for i in range(args.batch_size):\n            print(x[i], correct[i].item())\n")
    assert "gather_for_metrics" in new and "for i in range(len(x)):" in new, new


def test_a_loop_sized_by_the_batch_that_reads_no_gathered_row_is_left_alone() -> None:
    code = ROWS + "        for i in range(args.batch_size):\n            print(i)\n"
    assert "for i in range(args.batch_size):" in converted(code)
    assert "ACC033" not in " ".join(codes(code))


def test_converted_code_walking_gathered_rows_by_the_batch_size_is_reported() -> None:
    code = ROWS.replace(
        "        recon = model(x)\n", "        recon = model(x)\n        recon, x = accelerator.gather_for_metrics((recon, x))\n"
    ).replace("import torch\n", "import torch\nfrom accelify.runtime import Accelerator\naccelerator = Accelerator()\n", 1)
    code += "        for i in range(args.batch_size):\n            print(x[i])\n"
    assert any(c.startswith("ACC033:") for c in codes(code)), codes(code)
