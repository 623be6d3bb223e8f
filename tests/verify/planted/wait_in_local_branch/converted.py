"""Wrong: the save's wait_for_everyone() sits in a branch on the local loss, which differs between processes."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    best = float("inf")
    for epoch in range(3):
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if loss.item() < best:
                best = loss.item()
                accelerator.wait_for_everyone()
                accelerator.save(accelerator.unwrap_model(model).state_dict(), "best.pt")
        accelerator.print(f"epoch {epoch} best {best:.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
