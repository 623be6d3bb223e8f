"""A regression trained through helper objects of three kinds that many projects write: a trainer class that keeps its
own TensorBoard writer, a logger class that writes scalars and saves the model every epoch, and the much-copied
early-stopping class that saves the best weights, which the script loads back at the end."""
import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from early_stopping import EarlyStopping
from logger import Logger
from trainer import Trainer


def evaluate(model, loader):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            output = model(x)
            total += F.mse_loss(output, y, reduction="sum").item()
    return total / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    weights = torch.randn(4, 1)
    train_x, valid_x = torch.randn(64, 4), torch.randn(32, 4)
    train_set = TensorDataset(train_x, train_x @ weights + 0.1 * torch.randn(64, 1))
    valid_set = TensorDataset(valid_x, valid_x @ weights)
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    valid_loader = DataLoader(valid_set, batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    trainer = Trainer(model, optimizer, "runs/trainer")
    logger = Logger("runs/logger")
    early_stopping = EarlyStopping(patience=2, path="best.pt")
    for epoch in range(args.epochs):
        trainer.train_epoch(train_loader, epoch)
        val_loss = evaluate(model, valid_loader)
        print(f"epoch {epoch} val_loss {val_loss:.6f}")
        logger.log("val_loss", val_loss, epoch)
        logger.save_model(model, epoch)
        early_stopping(val_loss, model)
        if early_stopping.early_stop:
            break
    model.load_state_dict(torch.load("best.pt"))
    print(f"best val_loss {evaluate(model, valid_loader):.6f}")


if __name__ == "__main__":
    main()
