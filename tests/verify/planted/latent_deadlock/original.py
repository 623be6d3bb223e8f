"""An early stop on the training loss: the loop ends once a batch's loss falls under a threshold."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if loss.item() < 1e-9:
                break
        torch.save(model.state_dict(), "last.pt")
        print(f"epoch {epoch} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
