"""The loss is chosen by name from a registry of the program's losses and handed to the evaluation as a parameter:
which one runs cannot be told before the run. The default, a batch-hard triplet loss, takes for each anchor the
farthest positive and the nearest negative within the batch."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


class BatchHardLoss(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.margin = margin

    def forward(self, embeddings, labels):
        distances = torch.cdist(embeddings, embeddings)
        same = labels[:, None] == labels[None, :]
        hardest_positive = (distances * same).max(1).values
        hardest_negative = (distances + 1e6 * same).min(1).values
        return torch.relu(hardest_positive - hardest_negative + self.margin).mean()


LOSSES = {"batch_hard": BatchHardLoss(0.5), "cross_entropy": nn.CrossEntropyLoss()}


def evaluate(model, loader, loss_fn, accelerator):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            embeddings = model(x)
            total += loss_fn(embeddings, y).item()
        total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean").item()
    return total / len(loader)


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--loss", default="batch_hard", choices=sorted(LOSSES))
    args = parser.parse_args()
    torch.manual_seed(0)
    train_loader = DataLoader(TensorDataset(torch.randn(64, 6), torch.randint(0, 4, (64,))), batch_size=16, shuffle=True)
    test_loader = DataLoader(TensorDataset(torch.randn(48, 6), torch.randint(0, 4, (48,))), batch_size=8)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    loss_fn = LOSSES[args.loss]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, train_loader, test_loader = accelerator.prepare(
        model, optimizer, train_loader, test_loader
    )
    accelerator.print(f"before training test loss {evaluate(model, test_loader, loss_fn, accelerator):.6f}")
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            accelerator.backward(loss_fn(model(x), y))
            optimizer.step()
        accelerator.print(f"epoch {epoch} test loss {evaluate(model, test_loader, loss_fn, accelerator):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
