"""Per-epoch checkpoints with --resume, the best weights kept aside and reloaded for the final evaluation."""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.body(x)).squeeze(-1)


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 10, generator=g) * 2 - 1
    y = torch.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.05 * torch.randn(n, generator=g)
    return TensorDataset(x, y)


def evaluate(model, loader, device):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            pred = model(x)
            total += F.mse_loss(pred, y, reduction="sum").item()
    return total / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--checkpoint", default="checkpoint.pt", help="written every epoch, read by --resume")
    parser.add_argument("--best", default="best_model.pt", help="weights with the lowest validation loss")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader = DataLoader(make_data(600, seed=1), batch_size=25, shuffle=True)
    val_loader = DataLoader(make_data(150, seed=2), batch_size=50)
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)

    start_epoch = 0
    best_loss = float("inf")
    if args.resume and os.path.exists(args.checkpoint):
        checkpoint = torch.load(args.checkpoint)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_epoch = checkpoint["epoch"] + 1
        best_loss = checkpoint["best_loss"]
        print(f"resumed after epoch {checkpoint['epoch']} best_loss {best_loss:.6f}")

    for epoch in range(start_epoch, args.epochs):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        val_loss = evaluate(model, val_loader, device)
        print(f"epoch {epoch} train_loss {loss.item():.6f} val_loss {val_loss:.6f}")
        if val_loss < best_loss:
            best_loss = val_loss
            torch.save(model.state_dict(), args.best)
        torch.save(
            {"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "best_loss": best_loss},
            args.checkpoint,
        )

    # final evaluation with the best weights
    model.load_state_dict(torch.load(args.best))
    print(f"best val_loss {evaluate(model, val_loader, device):.6f}")


if __name__ == "__main__":
    main()
