"""A test loss summed from batch means over the evaluation loop and divided by the data set's size, the way
pytorch/examples' siamese_network and weiaicunzai/pytorch-cifar100 write it (`test_loss += criterion(outputs,
targets).sum().item()` with `criterion = nn.BCELoss()`, a batch's *mean*; then `test_loss /= len(test_loader.dataset)`),
beside a correct-count accuracy.

The conversion gathers the outputs and targets for metrics, so each pass of the loop holds N processes' batches and
the loop runs 1/N as many times: summed as written the loss would be 1/N of the original's. The value added becomes
the sum of the mean loss of each original batch the pass holds, so the printed loss is the original's on any number
of processes (100 test samples in batches of 8: the last round is uneven).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class PairNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Linear(8, 1)

    def forward(self, a, b):
        return torch.sigmoid(self.head(torch.abs(self.embed(a) - self.embed(b))))


def make_pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, 6, generator=g)
    same = torch.rand(n, generator=g) > 0.5
    b = torch.where(same[:, None], a + 0.1 * torch.randn(n, 6, generator=g), torch.randn(n, 6, generator=g))
    return TensorDataset(a, b, same.float())


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    criterion = nn.BCELoss()
    for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
        images_1, images_2, targets = images_1.to(device), images_2.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
    print(f"Train Epoch: {epoch} last loss: {loss.item():.6f}")


def test(model, device, test_loader, label):
    model.eval()
    test_loss = 0
    correct = 0
    criterion = nn.BCELoss()
    with torch.no_grad():
        for (images_1, images_2, targets) in test_loader:
            images_1, images_2, targets = images_1.to(device), images_2.to(device), targets.to(device)
            outputs = model(images_1, images_2).squeeze()
            test_loss += criterion(outputs, targets).sum().item()  # sum up batch loss
            pred = torch.where(outputs > 0.5, 1, 0)
            correct += pred.eq(targets.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(f"{label}: Average loss: {test_loss:.6f}, Accuracy: {correct}/{len(test_loader.dataset)}")


def main():
    parser = argparse.ArgumentParser(description="siamese-style pairs")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--test-batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--no-cuda", action="store_true", default=False)
    args = parser.parse_args()
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    torch.manual_seed(1)

    train_loader = DataLoader(make_pairs(128, 0), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(make_pairs(100, 1), batch_size=args.test_batch_size, shuffle=False)
    model = PairNet().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)

    test(model, device, test_loader, "Before training")
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader, f"Test set {epoch}")


if __name__ == "__main__":
    main()
