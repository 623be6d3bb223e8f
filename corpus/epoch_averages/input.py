"""Epoch averages over the training loader and a per-epoch learning-rate schedule, the way many training scripts
report them: `train_epoch` returns the loss summed over the epoch divided by `len(loader.dataset)` and the accuracy
as `correct / seen`, an accuracy helper in another module (`metrics.py`, no `no_grad`, no `eval()`) returns
`correct / total` for any loader, and a `StepLR(step_size=2)` is stepped once per epoch after the training helper.

On N processes each process walks 1/N of the batches: the sums are reduced across processes right after each loop,
and the per-epoch scheduler stays out of `prepare` (prepared, it would move N epochs per epoch).
"""
import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from metrics import accuracy


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()
    return TensorDataset(x, y)


def train_epoch(model, loader, optimizer):
    model.train()
    running_loss, correct, seen = 0.0, 0, 0
    for x, y in loader:
        optimizer.zero_grad()
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        running_loss += loss.item() * x.size(0)
        correct += (out.argmax(1) == y).sum().item()
        seen += y.size(0)
    return running_loss / len(loader.dataset), correct / seen


def main():
    parser = argparse.ArgumentParser(description="epoch averages")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.2)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_loader = DataLoader(make_data(256, seed=1), batch_size=32, shuffle=True)
    val_loader = DataLoader(make_data(128, seed=2), batch_size=32)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)

    print(f"before training: val acc {accuracy(model, val_loader):.4f}")
    for epoch in range(args.epochs):
        loss, acc = train_epoch(model, train_loader, optimizer)
        scheduler.step()
        val_acc = accuracy(model, val_loader)
        print(f"epoch {epoch} loss {loss:.4f} acc {acc:.4f} val acc {val_acc:.4f} lr {scheduler.get_last_lr()[0]:.4f}")


if __name__ == "__main__":
    main()
