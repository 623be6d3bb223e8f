"""The entry script of a three-file project: loaders come from `data.py`, the loops from `loops.py`.

Imitates the layout of small research repositories (train.py + data.py + engine/loops.py): the entry script parses
the arguments, builds the model and optimizer, gets the loaders from a sibling module and hands everything to a
`fit()` that lives in another module, passing `device` along.
"""
import argparse

import torch
import torch.nn as nn

import data
from loops import evaluate, fit
from accelify.runtime import Accelerator


class SmallCNN(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(8 * 4 * 4, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser(description="three-file project")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_dl, test_dl, classes = data.make_loaders(args.batch_size)
    model = SmallCNN(len(classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer, train_dl, test_dl = accelerator.prepare(
        model, optimizer, train_dl, test_dl
    )
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)

    val_loss, val_acc = evaluate(model, test_dl, accelerator)
    accelerator.print(f"before training val_loss {val_loss:.5f} val_acc {val_acc:.4f}")
    acc = fit(model, train_dl, test_dl, optimizer, scheduler, args.epochs, accelerator)
    accelerator.print(f"final val_acc {acc:.4f} over {len(classes)} classes")
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "small_cnn.pt")
    accelerator.end_training()


if __name__ == "__main__":
    main()
