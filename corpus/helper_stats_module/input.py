"""Logistic regression on normalised tabular features; the statistics come from a helper module."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader

from data import Normalized, compute_mean_std, make_dataset


def train_epoch(model, loader, optimizer, loss_fn, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set = make_dataset(1024, seed=1)
    mean, std = compute_mean_std(train_set)
    print(f"feature mean {mean.mean():.4f} std {std.mean():.4f}")
    loader = DataLoader(Normalized(train_set, mean, std), batch_size=args.batch_size, shuffle=True)

    model = nn.Linear(6, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        last = train_epoch(model, loader, optimizer, loss_fn, device)
        print(f"epoch {epoch} last_loss {last:.6f}")


if __name__ == "__main__":
    main()
