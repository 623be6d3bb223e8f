"""Validation accuracy from `model(x).argmax(1)`, counted with `total += y.size(0)`, and a best-checkpoint branch.

Imitates the classification scripts derived from kuangliu/pytorch-cifar and the PyTorch transfer-learning tutorial:
`pred = model(inputs).argmax(1)` (no named output), `correct += (pred == targets).sum().item()`,
`acc = 100. * correct / total`, and `if acc > best_acc:` saving a checkpoint dict.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


class ConvNet(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.conv = nn.Conv1d(1, 6, kernel_size=5, padding=2)
        self.fc = nn.Linear(6 * 8, num_classes)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.conv(x.unsqueeze(1))), 2)
        return self.fc(x.flatten(1))


def make_signals(n, seed, num_classes=5):
    """1-D signals of length 16 whose class is the frequency of a sine, plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    t = torch.linspace(0, 1, 16)
    phase = torch.rand(n, 1, generator=g) * 6.28
    x = torch.sin(6.28 * (labels[:, None] + 1) * t + phase) + 0.4 * torch.randn(n, 16, generator=g)
    return TensorDataset(x, labels)


def train(model, loader, optimizer, accelerator):
    model.train()
    train_loss = 0.0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        train_loss += loss.item()
    train_loss = accelerator.reduce(torch.tensor(train_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
    return train_loss / len(loader)


def test(model, loader, accelerator):
    model.eval()
    correct = 0
    total = 0
    with torch.no_grad():
        for inputs, targets in loader:
            pred = model(inputs).argmax(1)
            pred, targets = accelerator.gather_for_metrics((pred, targets))
            correct += (pred == targets).sum().item()
            total += targets.size(0)
    return 100.0 * correct / total


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser(description="best-checkpoint classifier")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    trainloader = DataLoader(make_signals(600, seed=11), batch_size=32, shuffle=True)
    testloader = DataLoader(make_signals(230, seed=12), batch_size=64, shuffle=False)
    model = ConvNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    model, optimizer, trainloader, testloader = accelerator.prepare(
        model, optimizer, trainloader, testloader
    )
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)

    best_acc = test(model, testloader, accelerator)
    accelerator.print(f"Accuracy before training: {best_acc:.3f}%")
    for epoch in range(args.epochs):
        train_loss = train(model, trainloader, optimizer, accelerator)
        acc = test(model, testloader, accelerator)
        scheduler.step()
        accelerator.print(f"Epoch {epoch}: train loss {train_loss:.4f} | test acc {acc:.3f}%")
        if acc > best_acc:
            accelerator.print("Saving..")
            state = {"model": accelerator.unwrap_model(model).state_dict(), "acc": acc, "epoch": epoch}
            accelerator.wait_for_everyone()
            accelerator.save(state, "ckpt.pth")
            best_acc = acc
    accelerator.print(f"Best accuracy: {best_acc:.3f}%")
    accelerator.end_training()


if __name__ == "__main__":
    main()
