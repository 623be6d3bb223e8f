"""Fit a noisy linear target with a small MLP until the validation error is low enough.

The problem is made up on the spot: a random true weight vector, random inputs, a random split.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


def make_problem(n_samples, n_features, noise):
    true_w = torch.randn(n_features, 1)
    x = torch.randn(n_samples, n_features)
    y = x @ true_w + noise * torch.randn(n_samples, 1)
    return TensorDataset(x, y)


def evaluate(model, loader, device):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            out = model(x)
            total += F.mse_loss(out, y, reduction="sum").item()
    model.train()
    return total / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--tol", type=float, default=0.05)
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = make_problem(1024, 8, noise=0.05)
    train_set, val_set = random_split(data, [768, 256])
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=64)

    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    print(f"before training val_mse {evaluate(model, val_loader, device):.6f}")

    for epoch in range(args.max_epochs):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        val_mse = evaluate(model, val_loader, device)
        print(f"epoch {epoch} val_mse {val_mse:.6f}")
        if val_mse < args.tol:
            print(f"converged after {epoch + 1} epochs")
            break


if __name__ == "__main__":
    main()
