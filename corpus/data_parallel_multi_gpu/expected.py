"""Multi-GPU the old way: nn.DataParallel when more than one GPU is visible."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator(split_batches=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(384, 12, generator=g)
    y = (x[:, 0] > x[:, 1]).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)

    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(3):
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), labels)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
