"""A loss with a small term taken over the whole batch at once (PointNet's feature-transform regulariser,
``alpha * norm(A Aᵀ - I)`` of the stacked batch): not a mean or a sum over the rows."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.transform = nn.Linear(4, 16)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        a = self.transform(x).view(-1, 4, 4)
        return self.head(torch.bmm(x.unsqueeze(1), a).squeeze(1)), a


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 4, generator=g)
    y = (x.sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for inputs, labels in loader:
            out, a = model(inputs)
            reg = torch.norm(torch.bmm(a, a.transpose(1, 2)) - torch.eye(4)[None])
            loss = nn.functional.cross_entropy(out, labels) + 0.001 * reg
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
