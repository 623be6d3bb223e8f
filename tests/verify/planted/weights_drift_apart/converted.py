"""Wrong: the noise generator is seeded per process, so each process perturbs its weights differently."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 10, generator=g)
    y = x @ torch.randn(10, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    noise = torch.Generator().manual_seed(1234 + accelerator.process_index)
    for epoch in range(2):
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1e-3 * torch.randn(p.shape, generator=noise))
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
