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
from accelify.runtime import Accelerator


def evaluate(model, loader, accelerator):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            output = model(x)
            output, y = accelerator.gather_for_metrics((output, y))
            total += F.mse_loss(output, y, reduction="sum").item()
    return total / len(loader.dataset)


def main():
    accelerator = Accelerator()
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
    model, optimizer, train_loader, valid_loader = accelerator.prepare(
        model, optimizer, train_loader, valid_loader
    )
    trainer = Trainer(model, optimizer, "runs/trainer", accelerator)
    logger = Logger("runs/logger", accelerator) if accelerator.is_main_process else None
    early_stopping = EarlyStopping(patience=2, path="best.pt", accelerator=accelerator)
    for epoch in range(args.epochs):
        trainer.train_epoch(train_loader, epoch)
        val_loss = evaluate(model, valid_loader, accelerator)
        accelerator.print(f"epoch {epoch} val_loss {val_loss:.6f}")
        if accelerator.is_main_process:
            logger.log("val_loss", val_loss, epoch)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            logger.save_model(model, epoch)
        early_stopping(val_loss, model)
        if early_stopping.early_stop:
            break
    accelerator.wait_for_everyone()
    accelerator.unwrap_model(model).load_state_dict(torch.load("best.pt", map_location="cpu"))
    accelerator.print(f"best val_loss {evaluate(model, valid_loader, accelerator):.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
