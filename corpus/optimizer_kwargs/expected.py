"""Config-driven training: the optimizer comes from a factory fed by a config section, `make_optimizer(model, **cfg)`.

Imitates config-driven repositories (a YAML file loaded into a dict; its `optim` section passed as keyword arguments
to a factory that splits the parameters into decay / no-decay groups and looks the class up in torch.optim).
"""
import argparse
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

CONFIG = {
    "model": {"hidden": 48, "dropout": 0.1},
    "optim": {"name": "AdamW", "lr": 3e-3, "weight_decay": 0.05, "betas": (0.9, 0.99)},
    "data": {"batch_size": 32, "n_train": 512, "n_val": 256},
}


class MLP(nn.Module):
    def __init__(self, hidden, dropout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(10, hidden), nn.LayerNorm(hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 4)
        )

    def forward(self, x):
        return self.net(x)


def make_optimizer(model, name="SGD", lr=0.1, weight_decay=0.0, **kwargs):
    """No weight decay on biases and norm weights, as most recipes do."""
    decay, no_decay = [], []
    for _, param in model.named_parameters():
        (no_decay if param.ndim < 2 else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return getattr(torch.optim, name)(groups, lr=lr, **kwargs)


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    y = (x[:, 0] > 0).long() * 2 + (x[:, 1] > 0).long()
    return TensorDataset(x, y)


@torch.no_grad()
def evaluate(model, loader, accelerator):
    model.eval()
    correct = 0
    for x, y in loader:
        logits = model(x)
        logits, y = accelerator.gather_for_metrics((logits, y))
        correct += (logits.argmax(dim=-1) == y).sum().item()
    return correct / len(loader.dataset)


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=None, help="overrides optim.lr from the config")
    args = parser.parse_args()

    cfg = copy.deepcopy(CONFIG)
    if args.lr is not None:
        cfg["optim"]["lr"] = args.lr

    torch.manual_seed(3)
    model = MLP(**cfg["model"])
    optimizer = make_optimizer(model, **cfg["optim"])
    data_cfg = cfg["data"]
    train_loader = DataLoader(make_dataset(data_cfg["n_train"], 1), batch_size=data_cfg["batch_size"], shuffle=True)
    val_loader = DataLoader(make_dataset(data_cfg["n_val"], 2), batch_size=64)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )
    criterion = nn.CrossEntropyLoss()

    accelerator.print(f"val_acc before training {evaluate(model, val_loader, accelerator):.4f}")
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.5f} val_acc {evaluate(model, val_loader, accelerator):.4f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
