"""Discriminative learning rates the simple way: one optimizer per block, kept in a list, plus one for the head.

Imitates fine-tuning scripts that give each block of a network its own optimizer (lower learning rates for the
earlier blocks, ULMFiT-style), built in a list comprehension, extended with `append`, and driven with
`for opt in optimizers: opt.zero_grad()` / `opt.step()` around a single backward.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class BlockNet(nn.Module):
    def __init__(self, width=32, depth=3, num_classes=5):
        super().__init__()
        self.stem = nn.Linear(12, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=g)
    y = (x[:, :5] * torch.linspace(1.0, 2.0, 5)).argmax(dim=1)
    return TensorDataset(x, y)


def evaluate(model, loader, device):
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
    return loss_sum / len(loader.dataset), correct / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of the last block")
    parser.add_argument("--decay", type=float, default=0.5, help="each earlier block gets this factor more")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader = DataLoader(make_dataset(640, seed=1), batch_size=32, shuffle=True)
    val_loader = DataLoader(make_dataset(256, seed=2), batch_size=64)

    model = BlockNet().to(device)
    n_blocks = len(model.blocks)
    optimizers = [
        optim.SGD(block.parameters(), lr=args.lr * args.decay ** (n_blocks - 1 - i), momentum=0.9)
        for i, block in enumerate(model.blocks)
    ]
    optimizers.append(optim.Adam(list(model.stem.parameters()) + list(model.head.parameters()), lr=3e-3))

    val_loss, val_acc = evaluate(model, val_loader, device)
    print(f"before training: val_loss {val_loss:.5f} val_acc {val_acc:.4f}")
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            for opt in optimizers:
                opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            for opt in optimizers:
                opt.step()
        val_loss, val_acc = evaluate(model, val_loader, device)
        lrs = " ".join(f"{opt.param_groups[0]['lr']:.4f}" for opt in optimizers)
        print(f"epoch {epoch}: loss {loss.item():.5f} val_loss {val_loss:.5f} val_acc {val_acc:.4f} lrs {lrs}")


if __name__ == "__main__":
    main()
