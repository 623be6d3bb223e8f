"""WGAN-GP: the critic trained `critic_iter` times per generator step, a gradient penalty summed into its loss."""
import torch
import torch.nn as nn
from torch import autograd
from accelify.runtime import Accelerator


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh())

    def forward(self, z):
        return self.main(z).view(-1, 1, 8, 8)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))

    def forward(self, x):
        return self.main(x)


class WGAN_GP(object):
    def __init__(self, args):
        self.accelerator = Accelerator()
        self.G = Generator()
        self.D = Discriminator()
        self.cuda = torch.cuda.is_available()
        self.d_optimizer = torch.optim.SGD(self.D.parameters(), lr=0.01, momentum=0.5)
        self.g_optimizer = torch.optim.SGD(self.G.parameters(), lr=0.01, momentum=0.5)
        self.generator_iters = args.generator_iters
        self.critic_iter = 3
        self.lambda_term = 10

    def get_torch_variable(self, arg):
        if self.cuda:
            return arg.to(self.accelerator.device)
        return arg

    def get_infinite_batches(self, data_loader):
        while True:
            for i, (images, _) in enumerate(data_loader):
                yield images

    def calculate_gradient_penalty(self, real_images, fake_images):
        eta = torch.rand(real_images.size(0), 1, 1, 1)
        eta = self.get_torch_variable(eta.expand_as(real_images))
        interpolated = (eta * real_images + (1 - eta) * fake_images).requires_grad_(True)
        prob_interpolated = self.D(interpolated)
        gradients = autograd.grad(outputs=prob_interpolated, inputs=interpolated,
                                  grad_outputs=self.get_torch_variable(torch.ones(prob_interpolated.size())),
                                  create_graph=True, retain_graph=True)[0]
        return ((gradients.view(gradients.size(0), -1).norm(2, dim=1) - 1) ** 2).mean() * self.lambda_term

    def train(self, train_loader):
        self.G, self.D, self.d_optimizer, self.g_optimizer, train_loader = self.accelerator.prepare(
            self.G, self.D, self.d_optimizer, self.g_optimizer, train_loader
        )
        self.data = self.get_infinite_batches(train_loader)
        one = torch.tensor(1, dtype=torch.float)
        mone = one * -1
        if self.cuda:
            one = one.to(self.accelerator.device)
            mone = mone.to(self.accelerator.device)

        for g_iter in range(self.generator_iters):
            for p in self.D.parameters():
                p.requires_grad = True
            for d_iter in range(self.critic_iter):
                self.D.zero_grad()
                images = self.get_torch_variable(self.data.__next__())
                z = self.get_torch_variable(torch.randn(images.size(0), 16))

                d_loss_real = self.D(images).mean()
                fake_images = self.G(z)
                d_loss_fake = self.D(fake_images).mean()
                gradient_penalty = self.calculate_gradient_penalty(images.data, fake_images.data)
                d_loss = d_loss_fake - d_loss_real + gradient_penalty
                self.accelerator.backward(d_loss, gradient=one)
                self.d_optimizer.step()

            for p in self.D.parameters():
                p.requires_grad = False
            self.G.zero_grad()
            z = self.get_torch_variable(torch.randn(images.size(0), 16))
            g_loss = self.D(self.G(z)).mean()
            self.accelerator.backward(g_loss, gradient=mone)
            self.g_optimizer.step()
            self.accelerator.print(f'Generator iteration: {g_iter}/{self.generator_iters}, d_loss: {d_loss.item():.5f}, g_loss: {g_loss.item():.5f}')

        self.accelerator.wait_for_everyone()
        self.accelerator.save(self.accelerator.unwrap_model(self.G).state_dict(), './generator.pkl')
        self.accelerator.save(self.accelerator.unwrap_model(self.D).state_dict(), './discriminator.pkl')
        self.accelerator.end_training()

    def evaluate(self, test_loader):
        for images, _ in test_loader:
            self.accelerator.print(f'critic on test images: {self.D(images).mean().item():.5f}')
