"""Early stopping on the training loss: stop when it has not improved by `--min-delta` for `--patience` epochs.

Imitates small autoencoder / time-series scripts that have no validation split and stop on the epoch's mean
training loss (the `pytorchtools.EarlyStopping` idea, written inline), then save the weights once at the end.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def make_windows(n, seed, length=24):
    """Noisy sine windows; the model reconstructs them through a bottleneck."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length).float()
    freq = 0.2 + 0.3 * torch.rand(n, 1, generator=g)
    phase = 6.28 * torch.rand(n, 1, generator=g)
    x = torch.sin(freq * t + phase) + 0.05 * torch.randn(n, length, generator=g)
    return TensorDataset(x)


class AutoEncoder(nn.Module):
    def __init__(self, length=24, code=4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(length, 16), nn.Tanh(), nn.Linear(16, code))
        self.decoder = nn.Sequential(nn.Linear(code, 16), nn.Tanh(), nn.Linear(16, length))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=40, help="upper limit; early stopping usually ends sooner")
    parser.add_argument("--patience", type=int, default=2)
    parser.add_argument("--min-delta", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    loader = DataLoader(make_windows(384, seed=5), batch_size=32, shuffle=True)
    model = AutoEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    criterion = nn.MSELoss()

    best_loss, bad_epochs = float("inf"), 0
    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for (x,) in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), x)
            accelerator.backward(loss)
            optimizer.step()
            running += loss.item()
        running = accelerator.reduce(torch.tensor(running, dtype=torch.float64, device=accelerator.device), "mean").item()
        epoch_loss = running / len(loader)
        accelerator.print(f"epoch {epoch} loss {epoch_loss:.5f}")
        if epoch_loss < best_loss - args.min_delta:
            best_loss, bad_epochs = epoch_loss, 0
        else:
            bad_epochs += 1
            if bad_epochs >= args.patience:
                accelerator.print(f"early stopping at epoch {epoch}: no improvement for {args.patience} epochs")
                accelerator.set_trigger()
        if accelerator.check_trigger():
            break

    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "autoencoder.pt")
    accelerator.print(f"best loss {best_loss:.5f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
