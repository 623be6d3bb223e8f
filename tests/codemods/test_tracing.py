"""``rules/tracing.py``: tracing, exporting or summarising a prepared model, in helpers and in the loop."""

from __future__ import annotations

from _convert import converted

SCRIPT = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from torchinfo import summary


def train(model, loader, optimizer, writer):
    for i, (x, y) in enumerate(loader):
        if i == 0:
            writer.add_graph(model, x)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()


def export(model, example):
    torch.onnx.export(model, example, "model.onnx")


def main():
    writer = SummaryWriter()
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    summary(model, input_size=(4, 2))
    train(model, loader, optimizer, writer)
    export(model, torch.ones(1, 2))


main()
'''


def test_unwrapped_on_the_main_process_in_helpers_too() -> None:
    out = converted(SCRIPT)
    assert "def train(model, loader, optimizer, writer, accelerator):" in out
    assert "            if accelerator.is_main_process:\n                writer.add_graph(accelerator.unwrap_model(model), x)\n" in out
    assert "def export(model, example, accelerator):\n    if accelerator.is_main_process:\n" in out
    assert "        torch.onnx.export(accelerator.unwrap_model(model), example, \"model.onnx\")\n" in out
    assert "    if accelerator.is_main_process:\n        summary(accelerator.unwrap_model(model), input_size=(4, 2))\n" in out
