"""Wrong: the per-epoch StepLR is prepared, so on N processes each call moves it N steps.

A small regression with a per-epoch StepLR: 4 batches an epoch, the learning rate halves after each epoch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    for epoch in range(4):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        scheduler.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f} lr {scheduler.get_last_lr()[0]:.4f}")


if __name__ == "__main__":
    main()
