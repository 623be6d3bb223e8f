"""A VAE-style model whose noise is drawn in place into a tensor shaped like the batch
(``eps = std.new(std.size()).normal_()``), as older VAE examples write it, with a mean loss."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.dec = nn.Linear(8, 4), nn.Linear(2, 8)

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        std = logvar.mul(0.5).exp()
        eps = std.new(std.size()).normal_()
        return self.dec(mu + eps * std)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 8, generator=g)
    loader = DataLoader(TensorDataset(x), batch_size=16, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for (inputs,) in loader:
            loss = nn.functional.mse_loss(model(inputs), inputs)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
