"""Fit a small regression MLP, written top to bottom like a notebook export (no functions)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)

# Synthetic data: y = x @ w + noise
features = torch.randn(512, 8)
true_w = torch.randn(8, 1)
targets = features @ true_w + 0.1 * torch.randn(512, 1)
loader = DataLoader(TensorDataset(features, targets), batch_size=32, shuffle=True)

model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
loss_fn = nn.MSELoss()

for epoch in range(4):
    model.train()
    running = 0.0
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        running += loss.item()
    running = accelerator.reduce(torch.tensor(running, dtype=torch.float64, device=accelerator.device), "mean").item()
    accelerator.print(f"epoch {epoch} loss {running / len(loader):.6f}")

accelerator.wait_for_everyone()
accelerator.save(accelerator.unwrap_model(model).state_dict(), "regressor.pt")
accelerator.print("saved regressor.pt")
accelerator.end_training()
