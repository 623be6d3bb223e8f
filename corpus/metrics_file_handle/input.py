"""Train a small classifier and keep a tab-separated metrics file open for the whole run."""
import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    y = (x[:, :3].sum(1) > 0).long()
    return TensorDataset(x, y)


class Trainer:
    def __init__(self, model, optimizer, loader, metrics_file, device):
        self.device = device
        self.model = model
        self.optimizer = optimizer
        self.loader = loader
        self.metrics = metrics_file
        self.loss_fn = nn.CrossEntropyLoss()

    def fit(self, epochs):
        self.metrics.write("epoch\tlast_loss\n")
        for epoch in range(epochs):
            for x, y in self.loader:
                x, y = x.to(self.device), y.to(self.device)
                self.optimizer.zero_grad()
                loss = self.loss_fn(self.model(x), y)
                loss.backward()
                self.optimizer.step()
            self.metrics.write(f"{epoch}\t{loss.item():.6f}\n")
            print(f"epoch {epoch} last_loss {loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    metrics = open(os.path.join(args.out, "metrics.tsv"), "w")
    loader = DataLoader(make_data(512, 1), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    Trainer(model, optimizer, loader, metrics, device).fit(args.epochs)
    metrics.close()


if __name__ == "__main__":
    main()
