"""A recurrent cell over a sequence whose hidden state is made for the configured batch size
(``torch.zeros(batch_size, ...)``), as many RNN examples do."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 32


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.rec, self.out = nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x, hidden):
        for t in range(x.size(1)):
            hidden = torch.tanh(self.inp(x[:, t]) + self.rec(hidden))
        return self.out(hidden)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 5, 6, generator=g)
    y = x.sum(dim=(1, 2)).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=True)
    model = Cell()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for inputs, targets in loader:
            hidden = torch.zeros(BATCH_SIZE, 8)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs, hidden), targets)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
