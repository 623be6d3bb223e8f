"""A WGAN in the layout of eriklindernoren/PyTorch-GAN's wgan.py: in one loop over the data, the critic takes a step
on every batch (weights clipped after it) and the generator one every `n_critic` batches, under `if i % n_critic ==
0:`. That condition is a schedule, not gradient accumulation: two optimizers, and the generator's backward runs
under it. Converting it as accumulation moved the generator's `step()` before its `backward()` (the generator
never trained) and made the critic step every `n_critic` batches only; it is left as it is.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


class Generator(nn.Module):
    def __init__(self, latent_dim, dim=32):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(latent_dim, dim), nn.ReLU(), nn.Linear(dim, 2))

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(2, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, x):
        return self.model(x)


def ring(n, seed):
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=g) * 6.2832
    points = torch.stack([angle.cos(), angle.sin()], dim=1) + 0.05 * torch.randn(n, 2, generator=g)
    return TensorDataset(points)


parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=3)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--lr", type=float, default=0.00005)
parser.add_argument("--latent_dim", type=int, default=4)
parser.add_argument("--n_critic", type=int, default=5)
parser.add_argument("--clip_value", type=float, default=0.01)
opt = parser.parse_args()

torch.manual_seed(0)
generator = Generator(opt.latent_dim)
discriminator = Discriminator()
dataloader = DataLoader(ring(320, seed=1), batch_size=opt.batch_size, shuffle=True)
optimizer_G = torch.optim.RMSprop(generator.parameters(), lr=opt.lr)
optimizer_D = torch.optim.RMSprop(discriminator.parameters(), lr=opt.lr)
generator, discriminator, optimizer_G, optimizer_D, dataloader = accelerator.prepare(
    generator, discriminator, optimizer_G, optimizer_D, dataloader
)

for epoch in range(opt.n_epochs):
    for i, (imgs,) in enumerate(dataloader):
        real_imgs = imgs

        # Train the critic
        optimizer_D.zero_grad()
        z = torch.randn(imgs.shape[0], opt.latent_dim)
        fake_imgs = generator(z).detach()
        loss_D = -torch.mean(discriminator(real_imgs)) + torch.mean(discriminator(fake_imgs))
        accelerator.backward(loss_D)
        optimizer_D.step()
        for p in discriminator.parameters():
            p.data.clamp_(-opt.clip_value, opt.clip_value)

        # Train the generator every n_critic iterations
        if i % opt.n_critic == 0:
            optimizer_G.zero_grad()
            gen_imgs = generator(z)
            loss_G = -torch.mean(discriminator(gen_imgs))
            accelerator.backward(loss_G)
            optimizer_G.step()
            accelerator.print("[Epoch %d/%d] [Batch %d/%d] [D loss: %f] [G loss: %f]"
                  % (epoch, opt.n_epochs, i, len(dataloader), loss_D.item(), loss_G.item()))
accelerator.end_training()
