"""A siamese pair net with a contrastive loss of its own (a mean of per-pair terms), evaluated over a test loader."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelerate import Accelerator


class ContrastiveLoss(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.margin = margin

    def forward(self, out1, out2, same):
        distances = (out2 - out1).pow(2).sum(1)
        losses = 0.5 * (same.float() * distances + (1 - same).float() * F.relu(self.margin - distances.sqrt()).pow(2))
        return losses.mean()


class PairNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, a, b):
        return self.embed(a), self.embed(b)


def evaluate(model, loader, criterion, accelerator):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for a, b, same in loader:
            out1, out2 = model(a, b)
            out1, out2, same = accelerator.gather_for_metrics((out1, out2, same))
            for out1, out2, same in zip(out1.split(loader.batch_sampler.batch_size), out2.split(loader.batch_sampler.batch_size), same.split(loader.batch_sampler.batch_size)):
                total += criterion(out1, out2, same).item()
    return total / len(getattr(loader.batch_sampler, "batch_sampler", loader.batch_sampler))


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    pairs = TensorDataset(torch.randn(64, 6), torch.randn(64, 6), torch.randint(0, 2, (64,)))
    tests = TensorDataset(torch.randn(48, 6), torch.randn(48, 6), torch.randint(0, 2, (48,)))
    train_loader = DataLoader(pairs, batch_size=8, shuffle=True)
    test_loader = DataLoader(tests, batch_size=8)
    model = PairNet()
    criterion = ContrastiveLoss(1.0).to(accelerator.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, train_loader, test_loader = accelerator.prepare(
        model, optimizer, train_loader, test_loader
    )
    accelerator.print(f"before training test loss {evaluate(model, test_loader, criterion, accelerator):.6f}")
    for epoch in range(args.epochs):
        model.train()
        for a, b, same in train_loader:
            optimizer.zero_grad()
            loss = criterion(*model(a, b), same)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} test loss {evaluate(model, test_loader, criterion, accelerator):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
