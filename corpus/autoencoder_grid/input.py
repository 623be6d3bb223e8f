"""A small autoencoder on 8x8 images, in the style of pytorch/examples' VAE: each test pass saves a grid of
the first inputs next to their reconstructions."""
import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


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


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for (data,) in train_loader:
        data = data.to(device)
        optimizer.zero_grad()
        recon = model(data)
        loss = F.binary_cross_entropy(recon, data, reduction="sum")
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} last batch loss {loss.item() / len(data):.4f}")


def test(args, model, device, test_loader, epoch):
    model.eval()
    test_loss = 0.0
    with torch.no_grad():
        for i, (data,) in enumerate(test_loader):
            data = data.to(device)
            recon = model(data)
            test_loss += F.binary_cross_entropy(recon, data, reduction="sum").item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data.view(args.batch_size, 1, 8, 8)[:n],
                                        recon.view(args.batch_size, 1, 8, 8)[:n]])
                torch.save(comparison.cpu(), os.path.join(args.out, f"reconstruction_{epoch}.pt"))
                print(f"epoch {epoch} grid {tuple(comparison.shape)}")
    test_loss /= len(test_loader.dataset)
    print(f"====> epoch {epoch} test loss {test_loss:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="autoencoder with a reconstruction grid")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--out", default="results")
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    torch.manual_seed(1)
    os.makedirs(args.out, exist_ok=True)

    train_loader = DataLoader(make_images(512, seed=1), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(make_images(96, seed=2), batch_size=args.batch_size)
    model = AutoEncoder().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(args, model, device, test_loader, epoch)
