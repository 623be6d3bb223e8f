"""Fit a noisy linear target with a small MLP until the validation error is low enough.

The problem is made up on the spot: a random true weight vector, random inputs, a random split.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from accelify.runtime import Accelerator


def make_problem(n_samples, n_features, noise):
    true_w = torch.randn(n_features, 1)
    x = torch.randn(n_samples, n_features)
    y = x @ true_w + noise * torch.randn(n_samples, 1)
    return TensorDataset(x, y)


def evaluate(model, loader, accelerator):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            out, y = accelerator.gather_for_metrics((out, y))
            total += F.mse_loss(out, y, reduction="sum").item()
    model.train()
    return total / len(loader.dataset)


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--tol", type=float, default=0.05)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = make_problem(1024, 8, noise=0.05)
    train_set, val_set = random_split(data, [768, 256])
    if accelerator.process_index > 0:
        torch.manual_seed(accelerator.process_index)
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=64)

    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )
    accelerator.print(f"before training val_mse {evaluate(model, val_loader, accelerator):.6f}")

    for epoch in range(args.max_epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        val_mse = evaluate(model, val_loader, accelerator)
        accelerator.print(f"epoch {epoch} val_mse {val_mse:.6f}")
        if val_mse < args.tol:
            accelerator.print(f"converged after {epoch + 1} epochs")
            break
    accelerator.end_training()


if __name__ == "__main__":
    main()
