"""A script that never chooses a device: everything it trains on comes from a DataLoader, and it makes no tensor of
its own where training runs. Written for whatever machine runs it, it is converted with `Accelerator()` (not
`Accelerator(cpu=True)`, which would pin the conversion to the CPU on the GPU machine it is for): the prepared
model and the prepared loader's batches go to the accelerator's device together.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split


def make_regression(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 4, generator=g) * 2 - 1
    y = (x * torch.tensor([1.5, -2.0, 0.5, 1.0])).sum(1, keepdim=True) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description="linear regression, no device")
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_set, val_set = random_split(make_regression(320, seed=3), [256, 64], generator=torch.Generator().manual_seed(4))
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=32)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.MSELoss()
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        val_loss = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                val_loss += loss_fn(model(x), y).item() * y.size(0)
        print(f"epoch {epoch} train loss {loss.item():.5f} val loss {val_loss / len(val_set):.5f}")


if __name__ == "__main__":
    main()
