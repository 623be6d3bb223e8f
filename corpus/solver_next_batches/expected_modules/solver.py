"""A StarGAN-style solver: `__init__` stores the loaders, picks `self.device` and calls `build_model()`; `train()`
draws batches with `next(data_iter)`, starting a new pass on StopIteration, and trains G once per `n_critic` D steps."""
import torch
import torch.nn as nn
from accelify.runtime import Accelerator


class Generator(nn.Module):
    def __init__(self, c_dim=3):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(3 + c_dim, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1), nn.Tanh())

    def forward(self, x, c):
        c = c.view(c.size(0), c.size(1), 1, 1).repeat(1, 1, x.size(2), x.size(3))
        return self.main(torch.cat([x, c], dim=1))


class Discriminator(nn.Module):
    def __init__(self, c_dim=3):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(3, 8, 4, stride=2, padding=1), nn.LeakyReLU(0.01))
        self.src = nn.Conv2d(8, 1, 3, padding=1)
        self.cls = nn.Conv2d(8, c_dim, 4)

    def forward(self, x):
        h = self.main(x)
        return self.src(h), self.cls(h).view(h.size(0), -1)


class Solver(object):
    def __init__(self, celeba_loader, rafd_loader, config):
        # Data loader.
        self.accelerator = Accelerator()
        self.celeba_loader = celeba_loader
        self.rafd_loader = rafd_loader

        # Training configurations.
        self.dataset = config.dataset
        self.num_iters = config.num_iters
        self.n_critic = config.n_critic
        self.log_step = config.log_step
        self.device = self.accelerator.device

        # Build the model.
        self.build_model()
        self.G, self.D, self.g_optimizer, self.d_optimizer, self.celeba_loader, self.rafd_loader = self.accelerator.prepare(
            self.G,
            self.D,
            self.g_optimizer,
            self.d_optimizer,
            self.celeba_loader,
            self.rafd_loader,
        )

    def build_model(self):
        """Create a generator and a discriminator."""
        self.G = Generator()
        self.D = Discriminator()
        self.g_optimizer = torch.optim.Adam(self.G.parameters(), 1e-3, [0.5, 0.999])
        self.d_optimizer = torch.optim.Adam(self.D.parameters(), 1e-3, [0.5, 0.999])

    def reset_grad(self):
        self.g_optimizer.zero_grad()
        self.d_optimizer.zero_grad()

    def train(self):
        if self.dataset == 'CelebA':
            data_loader = self.celeba_loader
        elif self.dataset == 'RaFD':
            data_loader = self.rafd_loader

        data_iter = iter(data_loader)
        for i in range(self.num_iters):
            try:
                x_real, label_org = next(data_iter)
            except:
                data_iter = iter(data_loader)
                x_real, label_org = next(data_iter)
            label_trg = 1 - label_org
            x_real = x_real.to(self.device)
            label_org = label_org.to(self.device)
            label_trg = label_trg.to(self.device)

            out_src, out_cls = self.D(x_real)
            d_loss_real = - torch.mean(out_src)
            d_loss_cls = nn.functional.binary_cross_entropy_with_logits(out_cls, label_org)
            x_fake = self.G(x_real, label_trg)
            out_src, _ = self.D(x_fake.detach())
            d_loss_fake = torch.mean(out_src)
            d_loss = d_loss_real + d_loss_fake + d_loss_cls
            self.reset_grad()
            self.accelerator.backward(d_loss)
            self.d_optimizer.step()

            if (i + 1) % self.n_critic == 0:
                x_fake = self.G(x_real, label_trg)
                out_src, out_cls = self.D(x_fake)
                g_loss = - torch.mean(out_src) + nn.functional.binary_cross_entropy_with_logits(out_cls, label_trg)
                self.reset_grad()
                self.accelerator.backward(g_loss)
                self.g_optimizer.step()

            if (i + 1) % self.log_step == 0:
                self.accelerator.print('Iteration [{}/{}], D/loss: {:.5f}, G/loss: {:.5f}'.format(i + 1, self.num_iters, d_loss.item(), g_loss.item()))
        self.accelerator.end_training()
