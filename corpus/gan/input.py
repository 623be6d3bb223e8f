"""A tiny GAN (DCGAN-style loop) that learns a 2-D ring of Gaussians: two models, two optimizers."""
import argparse
import math

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


def ring_dataset(n, seed, modes=8):
    g = torch.Generator().manual_seed(seed)
    angles = torch.randint(0, modes, (n,), generator=g).float() * (2 * math.pi / modes)
    points = torch.stack([angles.cos(), angles.sin()], dim=1) * 2.0
    return TensorDataset(points + 0.05 * torch.randn(n, 2, generator=g))


class Generator(nn.Module):
    def __init__(self, nz):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, 32), nn.ReLU(True), nn.Linear(32, 32), nn.ReLU(True), nn.Linear(32, 2))

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2, inplace=True), nn.Linear(32, 1), nn.Sigmoid())

    def forward(self, input):
        return self.main(input).view(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nz", type=int, default=4, help="size of the latent z vector")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--niter", type=int, default=2, help="number of epochs to train for")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--manual-seed", type=int, default=999)
    opt = parser.parse_args()

    torch.manual_seed(opt.manual_seed)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

    dataloader = DataLoader(ring_dataset(1024, seed=5), batch_size=opt.batch_size, shuffle=True, drop_last=True)

    netG = Generator(opt.nz).to(device)
    netD = Discriminator().to(device)
    criterion = nn.BCELoss()

    real_label = 1.0
    fake_label = 0.0

    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    for epoch in range(opt.niter):
        for i, (real_cpu,) in enumerate(dataloader):
            ############################
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            ###########################
            # train with real
            netD.zero_grad()
            real = real_cpu.to(device)
            batch_size = real.size(0)
            label = torch.full((batch_size,), real_label, dtype=real.dtype, device=device)

            output = netD(real)
            errD_real = criterion(output, label)
            errD_real.backward()
            D_x = output.mean().item()

            # train with fake
            noise = torch.randn(batch_size, opt.nz, device=device)
            fake = netG(noise)
            label.fill_(fake_label)
            output = netD(fake.detach())
            errD_fake = criterion(output, label)
            errD_fake.backward()
            D_G_z1 = output.mean().item()
            errD = errD_real + errD_fake
            optimizerD.step()

            ############################
            # (2) Update G network: maximize log(D(G(z)))
            ###########################
            netG.zero_grad()
            label.fill_(real_label)  # fake labels are real for generator cost
            output = netD(fake)
            errG = criterion(output, label)
            errG.backward()
            D_G_z2 = output.mean().item()
            optimizerG.step()

            if i % 4 == 0:
                print('[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f'
                      % (epoch, opt.niter, i, len(dataloader),
                         errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))

    # do checkpointing
    torch.save(netG.state_dict(), 'netG_epoch_%d.pth' % (opt.niter - 1))
    torch.save(netD.state_dict(), 'netD_epoch_%d.pth' % (opt.niter - 1))


if __name__ == "__main__":
    main()
