"""Wrong: the data set is drawn on each process from its own random state: the processes solve different problems.

A regression on a synthetic data set drawn with torch.randn, without a seed."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    x = torch.randn(256, 10)
    y = x @ torch.randn(10, 1) + 0.1 * torch.randn(256, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(2):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
