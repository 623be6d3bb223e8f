"""Trains, then scores the validation set after each epoch; keeps the weights of the best score (a phase loop over a
dict of loaders, as many segmentation and classification scripts write it)."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(192, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loader_train = DataLoader(TensorDataset(x[:128], y[:128]), batch_size=16, shuffle=True)
    loader_valid = DataLoader(TensorDataset(x[128:], y[128:]), batch_size=16)
    loaders = {"train": loader_train, "valid": loader_valid}
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    best = float("inf")
    for epoch in range(3):
        for phase in ["train", "valid"]:
            losses = []
            for inputs, targets in loaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    loss = nn.functional.mse_loss(model(inputs), targets)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                    else:
                        losses.append(loss.item())
            if phase == "valid":
                score = np.mean(losses)
                if score < best:
                    best = score
                    torch.save(model.state_dict(), "best.pt")
        print(f"epoch {epoch} best {best:.6f}")


if __name__ == "__main__":
    main()
