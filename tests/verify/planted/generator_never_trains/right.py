"""A tiny GAN on a 2-D ring: the discriminator and the generator each step once per batch."""
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def ring(n):
    g = torch.Generator().manual_seed(5)
    angles = torch.randint(0, 8, (n,), generator=g).float() * (2 * math.pi / 8)
    return torch.stack([angles.cos(), angles.sin()], dim=1) * 2.0 + 0.05 * torch.randn(n, 2, generator=g)


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(ring(256)), batch_size=32, shuffle=True, drop_last=True)
    netG = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    netD = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid())
    criterion = nn.BCELoss()
    optimizer_D = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optimizer_G = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
    netG, netD, optimizer_D, optimizer_G, loader = accelerator.prepare(netG, netD, optimizer_D, optimizer_G, loader)
    for epoch in range(2):
        for (real,) in loader:
            b = real.size(0)
            optimizer_D.zero_grad()
            fake = netG(torch.randn(b, 4))
            errD = criterion(netD(real).view(-1), torch.ones(b)) + criterion(netD(fake.detach()).view(-1), torch.zeros(b))
            accelerator.backward(errD)
            optimizer_D.step()
            optimizer_G.zero_grad()
            errG = criterion(netD(fake).view(-1), torch.ones(b))
            accelerator.backward(errG)
            optimizer_G.step()
        accelerator.print(f"epoch {epoch} errD {errD.item():.4f} errG {errG.item():.4f}")


if __name__ == "__main__":
    main()
