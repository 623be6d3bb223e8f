"""Wrong: the early stop tests one process's batch loss; the process that leaves the loop first waits at the save's
barrier while the others wait in their next backward. A short run never reaches the threshold, so only the
static check sees it."""
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
    for epoch in range(3):
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            if loss.item() < 1e-9:
                break
        accelerator.wait_for_everyone()
        accelerator.save(accelerator.unwrap_model(model).state_dict(), "last.pt")
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
