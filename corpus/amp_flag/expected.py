"""Mixed-precision training with torch.autocast and a GradScaler (both disabled on CPU)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :3].sum(dim=1) > 0).long()
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--amp", action="store_true", help="float16 autocast with loss scaling (CUDA only)")
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision="fp16" if args.amp and torch.cuda.is_available() else "no")

    torch.manual_seed(0)
    device = accelerator.device
    use_amp = args.amp and device.type == "cuda"

    loader = DataLoader(make_data(512, seed=1), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            with accelerator.autocast():
                loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
