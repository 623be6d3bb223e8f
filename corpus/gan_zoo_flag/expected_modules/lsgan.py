"""A least-squares GAN trainer: the same layout, its own networks and loss."""
import torch
import torch.nn as nn
import torch.optim as optim

import utils
from accelify.runtime import Accelerator


class generator(nn.Module):
    def __init__(self, input_dim=8):
        super(generator, self).__init__()
        self.fc = nn.Sequential(nn.Linear(input_dim, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh())

    def forward(self, input):
        return self.fc(input)


class discriminator(nn.Module):
    def __init__(self):
        super(discriminator, self).__init__()
        self.fc = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))

    def forward(self, input):
        return self.fc(input)


class LSGAN(object):
    def __init__(self, args):
        self.accelerator = Accelerator(cpu=True)
        self.epoch = args.epoch
        self.batch_size = args.batch_size
        self.model_name = args.gan_type
        self.z_dim = 8

        # load dataset
        self.data_loader = utils.dataloader(self.batch_size)

        # networks init
        self.G = generator(input_dim=self.z_dim)
        self.D = discriminator()
        self.G_optimizer = optim.SGD(self.G.parameters(), lr=args.lrG, momentum=0.5)
        self.D_optimizer = optim.SGD(self.D.parameters(), lr=args.lrD, momentum=0.5)
        self.G, self.D, self.G_optimizer, self.D_optimizer, self.data_loader = self.accelerator.prepare(
            self.G, self.D, self.G_optimizer, self.D_optimizer, self.data_loader
        )
        self.MSE_loss = nn.MSELoss()

        utils.print_network(self.G)
        utils.print_network(self.D)

    def train(self):
        self.D.train()
        self.accelerator.print('training start!!')
        for epoch in range(self.epoch):
            self.G.train()
            for iter, (x_, _) in enumerate(self.data_loader):
                z_ = torch.rand((x_.size(0), self.z_dim))
                y_real_, y_fake_ = torch.ones(x_.size(0), 1), torch.zeros(x_.size(0), 1)

                # update D network
                self.D_optimizer.zero_grad()
                D_real_loss = self.MSE_loss(self.D(x_), y_real_)
                G_ = self.G(z_)
                D_fake_loss = self.MSE_loss(self.D(G_), y_fake_)
                D_loss = D_real_loss + D_fake_loss
                self.accelerator.backward(D_loss)
                self.D_optimizer.step()

                # update G network
                self.G_optimizer.zero_grad()
                G_loss = self.MSE_loss(self.D(self.G(z_)), y_real_)
                self.accelerator.backward(G_loss)
                self.G_optimizer.step()

                if ((iter + 1) % 4) == 0:
                    self.accelerator.print("Epoch: [%2d] [%4d] D_loss: %.8f, G_loss: %.8f" %
                          ((epoch + 1), (iter + 1), D_loss.item(), G_loss.item()))
        self.save()
        self.accelerator.end_training()

    def save(self):
        self.accelerator.wait_for_everyone()
        self.accelerator.save(self.accelerator.unwrap_model(self.G).state_dict(), self.model_name + '_G.pkl')
        self.accelerator.save(self.accelerator.unwrap_model(self.D).state_dict(), self.model_name + '_D.pkl')
