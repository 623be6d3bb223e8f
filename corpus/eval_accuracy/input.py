"""Train a classifier and report validation loss, top-1 and top-3 accuracy after every epoch."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 6


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(NUM_CLASSES, 20, generator=torch.Generator().manual_seed(99))
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = prototypes[labels] + 2.5 * torch.randn(n, 20, generator=g)
    return TensorDataset(x, labels)


def train_one_epoch(model, loader, optimizer, criterion, device):
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def evaluate(model, loader, criterion, device):
    model.eval()
    total_loss, top1, top3 = 0.0, 0, 0
    with torch.inference_mode():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += criterion(logits, y).item() * y.size(0)
            top1 += (logits.argmax(dim=1) == y).sum().item()
            top3 += (logits.topk(3, dim=1).indices == y.unsqueeze(1)).any(dim=1).sum().item()
    n = len(loader.dataset)
    return total_loss / n, top1 / n, top3 / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU is available")
    args = parser.parse_args()

    torch.manual_seed(3)
    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda")
    train_loader = DataLoader(make_split(900, seed=1), batch_size=30, shuffle=True)
    val_loader = DataLoader(make_split(250, seed=2), batch_size=64, shuffle=False)

    model = nn.Sequential(nn.Linear(20, 48), nn.GELU(), nn.Linear(48, NUM_CLASSES)).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True)

    best = 0.0
    for epoch in range(1, args.epochs + 1):
        last_loss = train_one_epoch(model, train_loader, optimizer, criterion, device)
        val_loss, acc1, acc3 = evaluate(model, val_loader, criterion, device)
        best = max(best, acc1)
        print(f"epoch {epoch} train_loss {last_loss:.5f} val_loss {val_loss:.5f} top1 {acc1:.4f} top3 {acc3:.4f}")
    print(f"best top1 {best:.4f}")


if __name__ == "__main__":
    main()
