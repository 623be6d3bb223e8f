"""An autoencoder trained with tqdm progress bars (bars go to stderr; the losses are printed to stdout)."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm
from accelify.runtime import Accelerator


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
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(low_rank_data(640, seed=4), batch_size=args.batch_size, shuffle=True)
    model = AutoEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(args.epochs):
        model.train()
        epoch_loss = 0.0
        progress = tqdm(loader, desc=f"epoch {epoch}", leave=False, disable=not accelerator.is_local_main_process)
        for (batch,) in progress:
            reconstruction = model(batch)
            loss = nn.functional.mse_loss(reconstruction, batch)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            epoch_loss += loss.item()
            progress.set_postfix(loss=f"{loss.item():.4f}")
        epoch_loss = accelerator.reduce(torch.tensor(epoch_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
        accelerator.print(f"epoch {epoch} loss {epoch_loss / len(loader):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
