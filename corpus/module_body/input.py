"""Fit a small regression MLP, written top to bottom like a notebook export (no functions)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

# Synthetic data: y = x @ w + noise
features = torch.randn(512, 8)
true_w = torch.randn(8, 1)
targets = features @ true_w + 0.1 * torch.randn(512, 1)
loader = DataLoader(TensorDataset(features, targets), batch_size=32, shuffle=True)

model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.MSELoss()

for epoch in range(4):
    model.train()
    running = 0.0
    for xb, yb in loader:
        xb = xb.to(device)
        yb = yb.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        running += loss.item()
    print(f"epoch {epoch} loss {running / len(loader):.6f}")

torch.save(model.state_dict(), "regressor.pt")
print("saved regressor.pt")
