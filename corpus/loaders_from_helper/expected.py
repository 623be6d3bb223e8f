"""Regression with the loaders returned by a helper, and a device picked by an if/elif/else chain.

Imitates the scripts that grow out of the PyTorch tutorials and Kaggle notebooks: `train_dl, test_dl =
make_loaders(...)`, a device chosen branch by branch (cuda, mps, cpu) and printed, `test()` summing
`loss_fn(model(X), y)` without naming the model's output, divided by `len(dataloader.dataset)`.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def make_loaders(batch_size, n_train=640, n_test=300):
    g = torch.Generator().manual_seed(42)
    w = torch.randn(8, 1, generator=g)
    x = torch.randn(n_train + n_test, 8, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(n_train + n_test, 1, generator=g)
    train_ds = TensorDataset(x[:n_train], y[:n_train])
    test_ds = TensorDataset(x[n_train:], y[n_train:])
    return DataLoader(train_ds, batch_size=batch_size, shuffle=True), DataLoader(test_ds, batch_size=50)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1))

    def forward(self, x):
        return self.layers(x)


def train(dataloader, model, loss_fn, optimizer, accelerator):
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        loss = loss_fn(model(X), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        if batch % 10 == 0:
            accelerator.print(f"loss: {loss.item():>8f}  [batch {batch:>3d}]")


def test(dataloader, model, accelerator):
    model.eval()
    test_loss = 0.0
    with torch.no_grad():
        for X, y in dataloader:
            output = model(X)
            output, y = accelerator.gather_for_metrics((output, y))
            test_loss += F.mse_loss(output, y, reduction="sum").item()
    test_loss /= len(dataloader.dataset)
    return test_loss


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(7)
    if torch.cuda.is_available():
        device = accelerator.device
        torch.backends.cudnn.benchmark = True
    elif torch.backends.mps.is_available():
        device = accelerator.device
    else:
        device = accelerator.device
    accelerator.print(f"Using {device.type} device")

    train_dl, test_dl = make_loaders(args.batch_size)
    model = Regressor()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, train_dl, test_dl = accelerator.prepare(
        model, optimizer, train_dl, test_dl
    )

    accelerator.print(f"Test MSE before training: {test(test_dl, model, accelerator):.5f}")
    for t in range(args.epochs):
        accelerator.print(f"Epoch {t + 1}\n-------------------------------")
        train(train_dl, model, loss_fn, optimizer, accelerator)
        accelerator.print(f"Test MSE: {test(test_dl, model, accelerator):.5f}")
    accelerator.print("Done!")
    accelerator.end_training()


if __name__ == "__main__":
    main()
