"""Wrong: each process sums the mean losses of its own batches (1/N of them in a real launch) and the sums are
averaged over the processes ("mean"): a real launch prints 1/N of the original's sums. Exact mode, where
every process walks every batch, prints the original's value: verify judges it as a real launch computes it."""
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
    loader = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[96:], y[96:]), batch_size=16)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader, val_loader = accelerator.prepare(model, optimizer, loader, val_loader)
    criterion = nn.MSELoss()
    for epoch in range(2):
        model.train()
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            total += loss.item()
        total = accelerator.reduce(torch.tensor(total), "mean").item()
        model.eval()
        val = 0.0
        with torch.no_grad():
            for inputs, targets in val_loader:
                val += criterion(model(inputs), targets).item()
        val = accelerator.reduce(torch.tensor(val), "mean").item()
        accelerator.print(f"epoch {epoch} loss sum {total:.4f} val loss sum {val:.4f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
