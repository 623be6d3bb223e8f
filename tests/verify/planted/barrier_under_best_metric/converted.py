"""Wrong (what the save rule wrote before): the save's wait_for_everyone() sits under `if score < best:`, a test on
the mean of `losses`, which each process appends over its own shard of the validation loader (walked through the
dict of loaders rebuilt after prepare): the processes decide differently and one waits at the barrier while the
other trains on."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(192, 8, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loader_train = DataLoader(TensorDataset(x[:128], y[:128]), batch_size=16, shuffle=True)
    loader_valid = DataLoader(TensorDataset(x[128:], y[128:]), batch_size=16)
    loaders = {"train": loader_train, "valid": loader_valid}
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader_train, loader_valid = accelerator.prepare(
        model, optimizer, loader_train, loader_valid
    )
    loaders = {"train": loader_train, "valid": loader_valid}
    best = float("inf")
    for epoch in range(3):
        for phase in ["train", "valid"]:
            losses = []
            for inputs, targets in loaders[phase]:
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    loss = nn.functional.mse_loss(model(inputs), targets)
                    if phase == "train":
                        accelerator.backward(loss)
                        optimizer.step()
                    else:
                        losses.append(loss.item())
            if phase == "valid":
                score = np.mean(losses)
                if score < best:
                    best = score
                    accelerator.wait_for_everyone()
                    accelerator.save(accelerator.unwrap_model(model).state_dict(), "best.pt")
        accelerator.print(f"epoch {epoch} best {best:.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
