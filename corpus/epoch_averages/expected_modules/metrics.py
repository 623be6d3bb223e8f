"""Metrics shared by the training scripts."""
import torch


def accuracy(model, loader, accelerator):
    correct = total = 0
    for x, y in loader:
        pred = torch.argmax(model(x), dim=1)
        correct += (pred == y).sum().item()
        total += y.size(0)
    correct = accelerator.reduce(torch.tensor(correct, device=accelerator.device), "sum").item()
    total = accelerator.reduce(torch.tensor(total, device=accelerator.device), "sum").item()
    return correct / total
