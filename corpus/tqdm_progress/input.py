"""An autoencoder trained with tqdm progress bars (bars go to stderr; the losses are printed to stdout)."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm


class AutoEncoder(nn.Module):
    def __init__(self, dim=32, code=6):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 16), nn.ReLU(), nn.Linear(16, code))
        self.decoder = nn.Sequential(nn.Linear(code, 16), nn.ReLU(), nn.Linear(16, dim))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def low_rank_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(4, 32, generator=g)
    return TensorDataset(torch.randn(n, 4, generator=g) @ basis)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(low_rank_data(640, seed=4), batch_size=args.batch_size, shuffle=True)
    model = AutoEncoder().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)

    for epoch in range(args.epochs):
        model.train()
        epoch_loss = 0.0
        progress = tqdm(loader, desc=f"epoch {epoch}", leave=False)
        for (batch,) in progress:
            batch = batch.to(device)
            reconstruction = model(batch)
            loss = nn.functional.mse_loss(reconstruction, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            progress.set_postfix(loss=f"{loss.item():.4f}")
        print(f"epoch {epoch} loss {epoch_loss / len(loader):.6f}")


if __name__ == "__main__":
    main()
