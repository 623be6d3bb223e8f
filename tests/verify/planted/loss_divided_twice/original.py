"""Gradient accumulation by hand: the loss is divided by the number of micro-batches, the step taken every k."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.MSELoss()
    for epoch in range(2):
        for i, (inputs, targets) in enumerate(loader):
            loss = criterion(model(inputs), targets) / ACCUMULATION_STEPS
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
