"""Loaders stored into a dict's items one key at a time by a helper, walked as loaders['train'] and
loaders['valid'] by a Udacity-style train() that keeps the best checkpoint on the validation loss."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(args.seed)
use_cuda = torch.cuda.is_available()

inputs = torch.randn(96, 10)
targets = (inputs[:, :3].sum(dim=1) > 0).long()
data = {"train": TensorDataset(inputs[:64], targets[:64]), "valid": TensorDataset(inputs[64:], targets[64:])}


def make_loaders(data, batch_size):
    loaders = {}
    for split in ["train", "valid"]:
        loaders[split] = DataLoader(data[split], batch_size=batch_size, shuffle=split == "train")
    return loaders


def evaluate(loaders, model, criterion):
    model.eval()
    valid_loss, correct = 0.0, 0
    with torch.no_grad():
        for x, y in loaders["valid"]:
            if use_cuda:
                x, y = x.cuda(), y.cuda()
            output = model(x)
            valid_loss += criterion(output, y).item() * x.size(0)
            correct += (output.argmax(dim=1) == y).sum().item()
    size = len(loaders["valid"].dataset)
    return valid_loss / size, correct / size


def train(n_epochs, loaders, model, optimizer, criterion, save_path):
    valid_loss_min = float("inf")
    for epoch in range(1, n_epochs + 1):
        model.train()
        train_loss = 0.0
        for x, y in loaders["train"]:
            if use_cuda:
                x, y = x.cuda(), y.cuda()
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item() * x.size(0)
        train_loss = train_loss / len(loaders["train"].dataset)
        valid_loss, accuracy = evaluate(loaders, model, criterion)
        print(f"epoch {epoch} train loss {train_loss:.4f} valid loss {valid_loss:.4f} acc {accuracy:.4f}")
        if valid_loss < valid_loss_min:
            torch.save(model.state_dict(), save_path)
            valid_loss_min = valid_loss
    return model


loaders = make_loaders(data, batch_size=8)
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
if use_cuda:
    model = model.cuda()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
valid_loss, accuracy = evaluate(loaders, model, criterion)
print(f"before training valid loss {valid_loss:.4f} acc {accuracy:.4f}")
model = train(args.epochs, loaders, model, optimizer, criterion, "best.pt")
