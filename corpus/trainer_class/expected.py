"""A small Trainer class that owns its model, optimizer, loss and data loaders."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def make_blobs(n, seed):
    """Three Gaussian blobs in 16 dimensions."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(3, 16, generator=torch.Generator().manual_seed(7)) * 0.6
    labels = torch.randint(0, 3, (n,), generator=g)
    points = centers[labels] + torch.randn(n, 16, generator=g)
    return TensorDataset(points, labels)


class MLP(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)


class Trainer:
    """Builds everything in __init__; fit() runs the epochs."""

    def __init__(self, args):
        self.accelerator = Accelerator()
        self.args = args
        self.model = MLP(hidden=args.hidden)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
        self.criterion = nn.CrossEntropyLoss()
        self.train_loader = DataLoader(make_blobs(768, seed=1), batch_size=args.batch_size, shuffle=True)
        self.val_loader = DataLoader(make_blobs(200, seed=2), batch_size=64)
        self.model, self.optimizer, self.train_loader, self.val_loader = self.accelerator.prepare(
            self.model, self.optimizer, self.train_loader, self.val_loader
        )

    def train_epoch(self):
        self.model.train()
        total = 0.0
        for inputs, labels in self.train_loader:
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(inputs), labels)
            self.accelerator.backward(loss)
            self.optimizer.step()
            total += loss.item()
        total = self.accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=self.accelerator.device), "mean").item()
        return total / len(self.train_loader)

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        loss_sum, correct = 0.0, 0
        for inputs, labels in self.val_loader:
            outputs = self.model(inputs)
            outputs, labels = self.accelerator.gather_for_metrics((outputs, labels))
            loss_sum += self.criterion(outputs, labels).item() * labels.size(0)
            correct += (outputs.argmax(dim=1) == labels).sum().item()
        n = len(self.val_loader.dataset)
        return loss_sum / n, correct / n

    def fit(self):
        for epoch in range(self.args.epochs):
            train_loss = self.train_epoch()
            val_loss, val_acc = self.validate()
            self.accelerator.print(f"epoch {epoch} train_loss {train_loss:.6f} val_loss {val_loss:.6f} val_acc {val_acc:.4f}")
        self.accelerator.end_training()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    trainer = Trainer(args)
    trainer.fit()


if __name__ == "__main__":
    main()
