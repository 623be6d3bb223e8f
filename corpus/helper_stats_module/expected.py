"""Logistic regression on normalised tabular features; the statistics come from a helper module."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader

from data import Normalized, compute_mean_std, make_dataset
from accelify.runtime import Accelerator


def train_epoch(model, loader, optimizer, loss_fn, accelerator):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
    return loss.item()


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_set = make_dataset(1024, seed=1)
    mean, std = compute_mean_std(train_set)
    accelerator.print(f"feature mean {mean.mean():.4f} std {std.mean():.4f}")
    loader = DataLoader(Normalized(train_set, mean, std), batch_size=args.batch_size, shuffle=True)

    model = nn.Linear(6, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        last = train_epoch(model, loader, optimizer, loss_fn, accelerator)
        accelerator.print(f"epoch {epoch} last_loss {last:.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
