"""A data set downloaded inside a helper of the program (`get_loader` builds `Digits(root, download=True)`, like
pytorch-cifar100's `get_training_dataloader`), and the epoch loss kept as a list of detached per-batch losses
averaged after the pass (`torch.stack(losses).mean()`).

On N processes the helper's call runs under `main_process_first` (the main process downloads, the others then read
the files it wrote), and the list is gathered after the pass, so the printed epoch loss is over every batch.
"""
import argparse

import torch
import torch.nn.functional as F

from data import get_loader
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--root", default="data")
    args = parser.parse_args()
    torch.manual_seed(0)

    with accelerator.main_process_first():
        train_loader = get_loader(args.root, batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the epoch means of one model: equal on every count
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)

    for epoch in range(1, args.epochs + 1):
        losses = []
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            losses.append(loss.detach())
        losses = list(accelerator.gather(torch.stack(losses)))
        accelerator.print(f"epoch {epoch} mean loss {torch.stack(losses).mean().item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
