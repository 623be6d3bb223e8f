"""Fit a small regressor; the run's log goes to the console and to a file in the output folder."""
import argparse
import logging
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

logger = logging.getLogger(__name__)


def parse_args():
    parser = argparse.ArgumentParser(description="regression with a log file")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out-dir", default="runs/latest")
    return parser.parse_args()


def setup_logging(log_file):
    formatter = logging.Formatter("%(levelname)s %(message)s")
    file_handler = logging.FileHandler(log_file, mode="w")
    file_handler.setFormatter(formatter)
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(formatter)
    logger.setLevel(logging.INFO)
    logger.addHandler(file_handler)
    logger.addHandler(console)


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.linspace(-1.0, 1.0, 8)
    y = x @ w + 0.1 * torch.randn(n, generator=g)
    return TensorDataset(x, y.unsqueeze(1))


class Trainer:
    def __init__(self, model, optimizer, loader, device):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader
        self.device = device
        self.loss_fn = nn.MSELoss()

    def train_epoch(self, epoch):
        self.model.train()
        for step, (x, y) in enumerate(self.loader):
            x, y = x.to(self.device), y.to(self.device)
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            if step % 8 == 0:
                logger.debug("epoch %d step %d loss %.6f", epoch, step, loss.item())
        return loss.item()

    def fit(self, epochs):
        for epoch in range(epochs):
            last = self.train_epoch(epoch)
            logger.info("epoch %d last_loss %.6f", epoch, last)


def main():
    args = parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    log_file = os.path.join(args.out_dir, "train.log")
    setup_logging(log_file)
    logger.info("training for %d epochs, lr %.3f", args.epochs, args.lr)

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(make_dataset(256, seed=1), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    trainer = Trainer(model, optimizer, loader, device)
    trainer.fit(args.epochs)

    with open(log_file) as f:
        lines = f.read().splitlines()
    print(f"log has {len(lines)} lines, first: {lines[0]}")


if __name__ == "__main__":
    main()
