"""Train on data shipped as an archive: fetch it once, unpack it, cache the parsed tensors, train.

The raw data arrives as a zip of CSV-like text files; the first run unpacks it under --data-dir and writes a
parsed cache that later runs (and the training below) read.
"""
import argparse
import os
import zipfile

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def fetch_archive(path, accelerator):
    """Stands in for a download: writes the raw archive if it is not there yet."""
    if accelerator.is_main_process:
        if not os.path.exists(path):
            with zipfile.ZipFile(path, "w") as zf:
                g = torch.Generator().manual_seed(3)
                for split, n in (("train", 512), ("valid", 128)):
                    x = torch.randn(n, 5, generator=g)
                    y = x @ torch.tensor([0.5, -1.0, 0.25, 2.0, 0.0]) + 0.1
                    rows = "\n".join(",".join(f"{v:.6f}" for v in (*xi.tolist(), yi.item())) for xi, yi in zip(x, y))
                    zf.writestr(f"raw/{split}.csv", rows)
    accelerator.wait_for_everyone()


def unpack(archive, data_dir, accelerator):
    if accelerator.is_main_process:
        if not os.path.isdir(os.path.join(data_dir, "raw")):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(data_dir)
    accelerator.wait_for_everyone()


def load_split(data_dir, split):
    with open(os.path.join(data_dir, "raw", f"{split}.csv")) as f:
        table = torch.tensor([[float(v) for v in line.split(",")] for line in f.read().splitlines()])
    return TensorDataset(table[:, :5], table[:, 5:])


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    torch.manual_seed(0)

    os.makedirs(args.data_dir, exist_ok=True)
    archive = os.path.join(args.data_dir, "raw.zip")
    fetch_archive(archive, accelerator)
    unpack(archive, args.data_dir, accelerator)
    train_set = load_split(args.data_dir, "train")
    accelerator.print(f"train rows {len(train_set)}")

    loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model = nn.Linear(5, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} last_loss {loss.item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
