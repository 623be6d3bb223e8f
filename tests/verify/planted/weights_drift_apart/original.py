"""Perturbs the weights with a little noise after each step (a crude regulariser)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    noise = torch.Generator().manual_seed(1234)
    for epoch in range(2):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1e-3 * torch.randn(p.shape, generator=noise))
        print(f"epoch {epoch} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
