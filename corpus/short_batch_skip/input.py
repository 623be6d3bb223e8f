"""Skip the short last batch: the test loop stops at it, the training loop passes over it (BatchNorm cannot train on a batch of one)."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=4)
args = parser.parse_args()

torch.manual_seed(0)
train_set = TensorDataset(torch.randn(21, 3), torch.randint(0, 2, (21,)))
test_set = TensorDataset(torch.randn(11, 3), torch.randint(0, 2, (11,)))
train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
test_loader = DataLoader(test_set, batch_size=args.batch_size)
model = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def evaluate():
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in test_loader:
            if len(y) != args.batch_size:
                break
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.size(0)
    model.train()
    return correct, total


correct, total = evaluate()
print(f"before training acc {correct} / {total}")
for epoch in range(args.epochs):
    for x, y in train_loader:
        if x.size(0) != args.batch_size:
            continue
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
correct, total = evaluate()
print(f"after training acc {correct} / {total}")
