"""Train a small classifier, then trace it for deployment (`torch.jit.trace`) and save the traced module, as many
training scripts end.

On N processes the prepared model is wrapped (DistributedDataParallel): tracing the wrapper records the wrapper, and
every process would write the same file. The conversion traces `accelerator.unwrap_model(model)` and saves the
traced module on the main process only.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class MLP(nn.Module):
    def __init__(self, n_in=8, hidden=32, n_out=3):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser(description="train, then trace")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default="mlp_traced.pt")
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(make_data(256, seed=1), batch_size=32, shuffle=True)
    model = MLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")

    model.eval()
    example = torch.linspace(-1, 1, 16).reshape(2, 8)
    traced = torch.jit.trace(model, example)
    traced.save(args.out)
    print(f"traced output {traced(example).sum().item():.4f}")


if __name__ == "__main__":
    main()
