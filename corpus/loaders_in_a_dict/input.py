"""Loaders kept in a dict built before the model, walked as ``loaders[phase]`` (the transfer-learning tutorial's
loop): a training phase and a validation phase in one loop, the epoch's loss and accuracy over the whole split."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def make_split(n, generator):
    x = torch.randn(n, 6, generator=generator)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return TensorDataset(x, y)


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
loader_train = DataLoader(make_split(64, g), batch_size=8, shuffle=True)
loader_valid = DataLoader(make_split(32, g), batch_size=8)
loaders = {"train": loader_train, "valid": loader_valid}

model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(args.epochs):
    for phase in ["train", "valid"]:
        if phase == "train":
            model.train()
        else:
            model.eval()
        running_loss = 0.0
        running_corrects = 0
        for inputs, labels in loaders[phase]:
            optimizer.zero_grad()
            with torch.set_grad_enabled(phase == "train"):
                outputs = model(inputs)
                preds = outputs.argmax(1)
                loss = criterion(outputs, labels)
                if phase == "train":
                    loss.backward()
                    optimizer.step()
            running_loss += loss.item() * inputs.size(0)
            running_corrects += (preds == labels).sum().item()
        epoch_loss = running_loss / len(loaders[phase].dataset)
        epoch_acc = running_corrects / len(loaders[phase].dataset)
        print(f"epoch {epoch} {phase} loss {epoch_loss:.4f} acc {epoch_acc:.4f}")
