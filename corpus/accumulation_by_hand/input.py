"""Gradient accumulation by hand: the loss is divided by the number of micro-batches, the step taken every k."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(640, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g) + 0.1 * torch.randn(640, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)

    model = nn.Linear(10, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.MSELoss()

    for epoch in range(3):
        optimizer.zero_grad()
        for i, (inputs, targets) in enumerate(loader):
            inputs, targets = inputs.to(device), targets.to(device)
            loss = criterion(model(inputs), targets)
            loss = loss / ACCUMULATION_STEPS
            loss.backward()
            if (i + 1) % ACCUMULATION_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(f"epoch {epoch} loss {loss.item() * ACCUMULATION_STEPS:.6f}")


if __name__ == "__main__":
    main()
