"""A variational autoencoder that samples through `model.decode(z)` after each epoch.

Imitates pytorch/examples vae/main.py: module-level argparse, `args.cuda` derived from --no-cuda, a device picked by
an if/elif/else chain, module-level loaders, model and optimizer, train(epoch)/test(epoch) reading them as globals,
the loop under `if __name__ == "__main__":`, reconstructions and samples written to results/ (tensors here, where
the original writes PNGs with torchvision).
"""
import argparse
import os

import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F
from accelerate import Accelerator

parser = argparse.ArgumentParser(description="VAE Example")
parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="input batch size for training (default: 32)")
parser.add_argument("--epochs", type=int, default=3, metavar="N", help="number of epochs to train (default: 3)")
parser.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
parser.add_argument("--no-mps", action="store_true", default=False, help="disables macOS GPU training")
parser.add_argument("--seed", type=int, default=1, metavar="S", help="random seed (default: 1)")
parser.add_argument("--log-interval", type=int, default=8, metavar="N", help="how many batches to wait before logging training status")
args = parser.parse_args()
accelerator = Accelerator(cpu=args.no_cuda and args.no_mps)
args.cuda = not args.no_cuda and torch.cuda.is_available()
use_mps = not args.no_mps and torch.backends.mps.is_available()

torch.manual_seed(args.seed)

if args.cuda:
    device = accelerator.device
elif use_mps:
    device = accelerator.device
else:
    device = accelerator.device


def binary_patterns(n, seed):
    """16-pixel 'images' in [0, 1] made of two latent factors."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 2, generator=g)
    basis = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.TensorDataset(torch.sigmoid(2 * z @ basis), torch.zeros(n))


kwargs = {"num_workers": 1, "pin_memory": True} if args.cuda else {}
train_loader = torch.utils.data.DataLoader(binary_patterns(512, seed=1), batch_size=args.batch_size, shuffle=True, **kwargs)
test_loader = torch.utils.data.DataLoader(binary_patterns(200, seed=2), batch_size=args.batch_size, shuffle=False, **kwargs)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(16, 12)
        self.fc21 = nn.Linear(12, 2)
        self.fc22 = nn.Linear(12, 2)
        self.fc3 = nn.Linear(2, 12)
        self.fc4 = nn.Linear(12, 16)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        if not self.training:
            return mu
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 16))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE()
optimizer = optim.Adam(model.parameters(), lr=1e-2)
model, optimizer, train_loader, test_loader = accelerator.prepare(
    model, optimizer, train_loader, test_loader
)


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 16), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        accelerator.backward(loss)
        train_loss += loss.item()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            accelerator.print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader),
                loss.item() / len(data)))
    train_loss = accelerator.reduce(torch.tensor(train_loss, dtype=torch.float64, device=accelerator.device), "sum").item()

    accelerator.print("====> Epoch: {} Average loss: {:.4f}".format(epoch, train_loss / len(train_loader.dataset)))


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            recon_batch, mu, logvar = model(data)
            recon_batch, mu, logvar, data = accelerator.gather_for_metrics((recon_batch, mu, logvar, data))
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data[:n], recon_batch[:n]])
                accelerator.wait_for_everyone()
                accelerator.save(comparison.cpu(), "results/reconstruction_" + str(epoch) + ".pt")

    test_loss /= len(test_loader.dataset)
    accelerator.print("====> Test set loss after epoch {}: {:.4f}".format(epoch, test_loss))


if __name__ == "__main__":
    os.makedirs("results", exist_ok=True)
    test(0)
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        test(epoch)
        with torch.no_grad():
            sample = torch.randn(64, 2).to(device)
            sample = accelerator.unwrap_model(model).decode(sample).cpu()
            accelerator.wait_for_everyone()
            accelerator.save(sample.view(64, 16), "results/sample_" + str(epoch) + ".pt")
            accelerator.print("====> Sample mean after epoch {}: {:.4f}".format(epoch, sample.mean().item()))
    accelerator.end_training()
