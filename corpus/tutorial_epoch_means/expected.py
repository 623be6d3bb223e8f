"""Epoch numbers the way tutorials print them, at module level: the loss and the accuracy summed over the batches
and divided by the loop's own `enumerate` counter (`running_loss / i` after `for i, ... in enumerate(loader, 1)`), a
second pass's loss over `step + 1` (the default start), and detached losses (`loss.data`) over `len(train_loader)`.

On N processes each process walks 1/N of the batches, and as many as every other: the sums divided by the counter
are reduced with "mean" (the mean of the processes' means is the whole epoch's).
"""
import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
parser = argparse.ArgumentParser(description="tutorial epoch means")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

batch_size = 32
torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
x = torch.randn(256, 8, generator=g)
y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).long()
train_loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)

for epoch in range(args.epochs):
    running_loss = 0.0
    running_acc = 0.0
    total_loss = 0
    for i, (inputs, labels) in enumerate(train_loader, 1):
        out = model(inputs)
        loss = F.cross_entropy(out, labels)
        running_loss += loss.item()
        _, pred = torch.max(out, 1)
        running_acc += (pred == labels).float().mean()
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        total_loss += loss.data
    running_loss = accelerator.reduce(torch.tensor(running_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
    running_acc = accelerator.reduce(running_acc, "mean")
    total_loss = accelerator.reduce(total_loss, "mean")
    accelerator.print(f"epoch {epoch + 1} loss {running_loss / i:.6f} acc {running_acc / i:.6f} mean {total_loss / len(train_loader):.6f}")

    seen_loss = 0.0
    for step, (inputs, labels) in enumerate(train_loader):
        loss = F.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        seen_loss += loss.item()
    seen_loss = accelerator.reduce(torch.tensor(seen_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
    accelerator.print(f"epoch {epoch + 1} second pass loss {seen_loss / (step + 1):.6f}")
accelerator.end_training()
