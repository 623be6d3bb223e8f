"""A small regression: shuffled DataLoader, a linear model, SGD."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g) + 0.1 * torch.randn(512, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    criterion = nn.MSELoss()
    for epoch in range(2):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pt")
    accelerator.end_training()


if __name__ == "__main__":
    main()
