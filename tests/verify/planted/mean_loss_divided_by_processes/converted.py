"""Wrong: the mean loss is divided by the number of processes "because DDP sums the gradients" (it averages
them): on N processes every update is 1/N of the original's. By its values on a share of the batch it looks like a
loss summed over the batch; the loss function's reduction tells it apart."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 6, generator=g)
    y = x @ torch.randn(6, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    criterion = nn.MSELoss(reduction="mean")
    for epoch in range(2):
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets) / accelerator.num_processes
            accelerator.backward(loss)
            optimizer.step()
            total += loss.item() * inputs.size(0) * accelerator.num_processes
        total = accelerator.reduce(torch.tensor(total), "sum").item()
        accelerator.print(f"epoch {epoch} loss per sample {total / len(loader.dataset):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
