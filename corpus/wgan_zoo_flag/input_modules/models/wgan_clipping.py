"""WGAN with weight clipping: the critic trained `critic_iter` times per generator step, its weights clipped."""
import torch
import torch.nn as nn


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main_module = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh())

    def forward(self, z):
        return self.main_module(z).view(-1, 1, 8, 8)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main_module = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))

    def forward(self, x):
        return self.main_module(x)


class WGAN_CP(object):
    def __init__(self, args):
        print("WGAN_CP init model.")
        self.G = Generator()
        self.D = Discriminator()
        self.learning_rate = 0.01
        self.weight_cliping_limit = 0.01
        self.d_optimizer = torch.optim.SGD(self.D.parameters(), lr=self.learning_rate, momentum=0.5)
        self.g_optimizer = torch.optim.SGD(self.G.parameters(), lr=self.learning_rate, momentum=0.5)
        self.generator_iters = args.generator_iters
        self.critic_iter = 3

    def get_infinite_batches(self, data_loader):
        while True:
            for i, (images, _) in enumerate(data_loader):
                yield images

    def train(self, train_loader):
        self.data = self.get_infinite_batches(train_loader)
        one = torch.tensor(1, dtype=torch.float)
        mone = one * -1

        for g_iter in range(self.generator_iters):
            for p in self.D.parameters():
                p.requires_grad = True
            for d_iter in range(self.critic_iter):
                self.D.zero_grad()
                for p in self.D.parameters():
                    p.data.clamp_(-self.weight_cliping_limit, self.weight_cliping_limit)
                images = self.data.__next__()
                z = torch.randn(images.size(0), 16)
                d_loss_real = self.D(images).mean()
                d_loss_fake = self.D(self.G(z)).mean()
                d_loss = d_loss_fake - d_loss_real
                d_loss.backward(one)
                self.d_optimizer.step()

            for p in self.D.parameters():
                p.requires_grad = False
            self.G.zero_grad()
            z = torch.randn(images.size(0), 16)
            g_loss = self.D(self.G(z)).mean()
            g_loss.backward(mone)
            self.g_optimizer.step()
            print(f'Generator iteration: {g_iter}/{self.generator_iters}, d_loss: {d_loss.item():.5f}, g_loss: {g_loss.item():.5f}')
        self.save_model()

    def evaluate(self, test_loader):
        for images, _ in test_loader:
            print(f'critic on test images: {self.D(images).mean().item():.5f}')

    def save_model(self):
        torch.save(self.G.state_dict(), './generator.pkl')
        torch.save(self.D.state_dict(), './discriminator.pkl')
        print('Models save to ./generator.pkl & ./discriminator.pkl ')
