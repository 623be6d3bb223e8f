"""A small autoencoder on 8x8 images, in the style of pytorch/examples' VAE: each test pass saves a grid of
the first inputs next to their reconstructions."""
import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.rand(4, 64, generator=g)
    which = torch.randint(0, 4, (n,), generator=g)
    x = (prototypes[which] + 0.1 * torch.rand(n, 64, generator=g)).clamp(0, 1)
    return TensorDataset(x)


class AutoEncoder(nn.Module):
    def __init__(self, hidden=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, hidden))
        self.decoder = nn.Sequential(nn.Linear(hidden, 32), nn.ReLU(), nn.Linear(32, 64))

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))


def train(args, model, accelerator, train_loader, optimizer, epoch):
    model.train()
    for (data,) in train_loader:
        optimizer.zero_grad()
        recon = model(data)
        loss = F.binary_cross_entropy(recon, data, reduction="sum")
        accelerator.backward(loss)
        optimizer.step()
    accelerator.print(f"epoch {epoch} last batch loss {loss.item() / len(data):.4f}")


def test(args, model, accelerator, test_loader, epoch):
    model.eval()
    test_loss = 0.0
    with torch.no_grad():
        for i, (data,) in enumerate(test_loader):
            recon = model(data)
            recon, data = accelerator.gather_for_metrics((recon, data))
            test_loss += F.binary_cross_entropy(recon, data, reduction="sum").item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data.view(-1, 1, 8, 8)[:n],
                                        recon.view(-1, 1, 8, 8)[:n]])
                accelerator.wait_for_everyone()
                accelerator.save(comparison.cpu(), os.path.join(args.out, f"reconstruction_{epoch}.pt"))
                accelerator.print(f"epoch {epoch} grid {tuple(comparison.shape)}")
    test_loss /= len(test_loader.dataset)
    accelerator.print(f"====> epoch {epoch} test loss {test_loss:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="autoencoder with a reconstruction grid")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--out", default="results")
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()
    accelerator = Accelerator(cpu=args.no_cuda)
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    torch.manual_seed(1)
    os.makedirs(args.out, exist_ok=True)

    train_loader = DataLoader(make_images(512, seed=1), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(make_images(96, seed=2), batch_size=args.batch_size)
    model = AutoEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, test_loader = accelerator.prepare(
        model, optimizer, train_loader, test_loader
    )
    for epoch in range(1, args.epochs + 1):
        train(args, model, accelerator, train_loader, optimizer, epoch)
        test(args, model, accelerator, test_loader, epoch)
    accelerator.end_training()
