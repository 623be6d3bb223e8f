"""Metrics shared by the training scripts."""
import torch


def accuracy(model, loader):
    correct = total = 0
    for x, y in loader:
        pred = torch.argmax(model(x), dim=1)
        correct += (pred == y).sum().item()
        total += y.size(0)
    return correct / total
