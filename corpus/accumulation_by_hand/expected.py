"""Gradient accumulation by hand: the loss is divided by the number of micro-batches, the step taken every k."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

ACCUMULATION_STEPS = 4


def main():
    accelerator = Accelerator(gradient_accumulation_steps=ACCUMULATION_STEPS)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(640, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g) + 0.1 * torch.randn(640, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)

    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    criterion = nn.MSELoss()

    for epoch in range(3):
        optimizer.zero_grad()
        for i, (inputs, targets) in enumerate(loader):
            with accelerator.accumulate(model):
                loss = criterion(model(inputs), targets)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        accelerator.print(f"epoch {epoch} loss {(loss / ACCUMULATION_STEPS).item() * ACCUMULATION_STEPS:.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
