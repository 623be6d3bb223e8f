"""Loaders kept in a dict made before the model (brain-segmentation-pytorch's shape), two batches per epoch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 4, generator=g)
    y = x.sum(1, keepdim=True)
    loader_train = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    loader_valid = DataLoader(TensorDataset(x, y), batch_size=4)
    loaders = {"train": loader_train, "valid": loader_valid}
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader_train, loader_valid = accelerator.prepare(  # wrong: the dict keeps the old loaders
        model, optimizer, loader_train, loader_valid
    )
    for epoch in range(3):
        for inputs, targets in loaders["train"]:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
