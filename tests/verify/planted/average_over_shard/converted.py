"""Wrong: the epoch's loss is summed over this process's shard only and divided by the whole data set's size:
on N processes the main process prints about 1/N of the mean."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    criterion = nn.MSELoss()
    for epoch in range(3):
        running = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            running += loss.item() * inputs.size(0)
        accelerator.print(f"epoch {epoch} train loss {running / len(loader.dataset):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
