"""Wrong: the validation loader is prepared (each process validates its shard), and the sum of its per-batch losses,
divided by the loop's last index, is printed by the main process as it is: process 0's share."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(480, 8, generator=g)
    y = x[:, :2].sum(1, keepdim=True) + 0.3 * torch.randn(480, 1, generator=g)
    train = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=16, shuffle=True)
    valid = DataLoader(TensorDataset(x[320:], y[320:]), batch_size=16)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, train, valid = accelerator.prepare(model, optimizer, train, valid)
    for epoch in range(10):
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        valid_loss = 0.0
        with torch.no_grad():
            for k, (inputs, targets) in enumerate(valid):
                valid_loss += nn.functional.mse_loss(model(inputs), targets).item()
        accelerator.print(f"epoch {epoch} | valid loss {valid_loss / k:.5f}")


if __name__ == "__main__":
    main()
