"""A WGAN trainer class: the critic steps every iteration, the generator every `critic_iterations` iterations.

Imitates EmilienDupont/wgan-gp (training.py + main.py) with the original WGAN's weight clipping instead of the
gradient penalty: main() builds the generator, the critic, both optimizers and the loader, then hands them to
`Trainer(generator, discriminator, gen_optimizer, dis_optimizer, ..., use_cuda=...)`; `trainer.train(data_loader,
epochs)` runs the loop; the generator draws its own latents through its `sample_latent()` method. The
`num_steps % critic_iterations == 0` schedule is not gradient accumulation: each backward is followed by its own step.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from accelerate import Accelerator


class Generator(nn.Module):
    def __init__(self, latent_dim=4, dim=32):
        super().__init__()
        self.latent_dim = latent_dim
        self.net = nn.Sequential(nn.Linear(latent_dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 2))

    def forward(self, input_data):
        return self.net(input_data)

    def sample_latent(self, num_samples):
        return torch.randn((num_samples, self.latent_dim))


class Discriminator(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, dim), nn.LeakyReLU(0.2), nn.Linear(dim, dim), nn.LeakyReLU(0.2), nn.Linear(dim, 1))

    def forward(self, input_data):
        return self.net(input_data)


class Trainer():
    def __init__(self, generator, discriminator, gen_optimizer, dis_optimizer,
                 critic_iterations=5, weight_clip=0.05, print_every=4, use_cuda=False, *, accelerator):
        self.accelerator = accelerator
        self.G = generator
        self.G_opt = gen_optimizer
        self.D = discriminator
        self.D_opt = dis_optimizer
        self.losses = {'G': [], 'D': []}
        self.num_steps = 0
        self.use_cuda = use_cuda
        self.critic_iterations = critic_iterations
        self.weight_clip = weight_clip
        self.print_every = print_every

    def _critic_train_iteration(self, data):
        # Get generated data
        batch_size = data.size()[0]
        generated_data = self.sample_generator(batch_size)

        # Calculate probabilities on real and generated data
        d_real = self.D(data)
        d_generated = self.D(generated_data)

        # Optimize
        self.D_opt.zero_grad()
        d_loss = d_generated.mean() - d_real.mean()
        self.accelerator.backward(d_loss)
        self.D_opt.step()

        # Keep the critic Lipschitz by clipping its weights
        for p in self.D.parameters():
            p.data.clamp_(-self.weight_clip, self.weight_clip)

        # Record loss
        self.losses['D'].append(d_loss.item())

    def _generator_train_iteration(self, data):
        self.G_opt.zero_grad()

        # Get generated data
        batch_size = data.size()[0]
        generated_data = self.sample_generator(batch_size)

        # Calculate loss and optimize
        d_generated = self.D(generated_data)
        g_loss = - d_generated.mean()
        self.accelerator.backward(g_loss)
        self.G_opt.step()

        # Record loss
        self.losses['G'].append(g_loss.item())

    def _train_epoch(self, data_loader):
        for i, data in enumerate(data_loader):
            self.num_steps += 1
            self._critic_train_iteration(data[0])
            # Only update generator every |critic_iterations| iterations
            if self.num_steps % self.critic_iterations == 0:
                self._generator_train_iteration(data[0])

            if i % self.print_every == 0:
                self.accelerator.print("Iteration {}".format(i + 1))
                self.accelerator.print("D: {}".format(self.losses['D'][-1]))
                if self.num_steps > self.critic_iterations:
                    self.accelerator.print("G: {}".format(self.losses['G'][-1]))

    def train(self, data_loader, epochs):
        for epoch in range(epochs):
            self.accelerator.print("\nEpoch {}".format(epoch + 1))
            self._train_epoch(data_loader)

    def sample_generator(self, num_samples):
        latent_samples = self.accelerator.unwrap_model(self.G).sample_latent(num_samples)
        latent_samples = latent_samples.to(self.accelerator.device)
        generated_data = self.G(latent_samples)
        return generated_data


def eight_gaussians(n, seed):
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 8, (n,), generator=g).float() * (2 * math.pi / 8)
    return TensorDataset(2 * torch.stack([k.cos(), k.sin()], 1) + 0.05 * torch.randn(n, 2, generator=g))


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data_loader = DataLoader(eight_gaussians(1024, seed=1), batch_size=args.batch_size, shuffle=True, drop_last=True)

    generator = Generator()
    discriminator = Discriminator()
    # Initialize optimizers (RMSprop, as in the WGAN paper)
    G_optimizer = optim.RMSprop(generator.parameters(), lr=5e-4)
    D_optimizer = optim.RMSprop(discriminator.parameters(), lr=5e-4)
    generator, discriminator, G_optimizer, D_optimizer, data_loader = accelerator.prepare(
        generator, discriminator, G_optimizer, D_optimizer, data_loader
    )

    # Train model
    trainer = Trainer(generator, discriminator, G_optimizer, D_optimizer,
                      critic_iterations=5, use_cuda=torch.cuda.is_available(), accelerator=accelerator)
    trainer.train(data_loader, args.epochs)

    # Save models
    name = 'wgan_ring'
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(trainer.G).state_dict(), './gen_' + name + '.pt')
    accelerator.save(accelerator.unwrap_model(trainer.D).state_dict(), './dis_' + name + '.pt')
    accelerator.end_training()


if __name__ == "__main__":
    main()
