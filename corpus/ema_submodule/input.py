"""A denoising model that keeps an EMA copy of its network inside itself (as DDPM code does): the copy is updated
after every step and used for sampling, never in the loss."""
import argparse
from copy import deepcopy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Denoiser(nn.Module):
    def __init__(self, net, decay=0.9):
        super().__init__()
        self.net = net
        self.ema_net = deepcopy(net)
        self.decay = decay

    @torch.no_grad()
    def update_ema(self):
        for e, p in zip(self.ema_net.parameters(), self.net.parameters()):
            e.mul_(self.decay).add_(p, alpha=1 - self.decay)

    @torch.no_grad()
    def sample(self, noise):
        return noise - self.ema_net(noise)

    def loss(self, x, noise):
        return F.mse_loss(self.net(x + noise), noise)

    def forward(self, x):
        return self.loss(x, torch.randn_like(x) * 0.1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator().manual_seed(1)
    loader = DataLoader(TensorDataset(torch.randn(256, 8, generator=g)), batch_size=16, shuffle=True)
    model = Denoiser(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    for epoch in range(args.epochs):
        for (x,) in loader:
            x = x.to(device)
            loss = model(x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.update_ema()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
