"""A regression whose epoch losses are printed as sums of per-batch mean losses, never divided: the training loss
and the loss on a held-out set evaluated after each epoch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 6, generator=g)
    y = x @ torch.randn(6, 1, generator=g)
    loader = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[96:], y[96:]), batch_size=16)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.MSELoss()
    for epoch in range(2):
        model.train()
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        model.eval()
        val = 0.0
        with torch.no_grad():
            for inputs, targets in val_loader:
                val += criterion(model(inputs), targets).item()
        print(f"epoch {epoch} loss sum {total:.4f} val loss sum {val:.4f}")


if __name__ == "__main__":
    main()
