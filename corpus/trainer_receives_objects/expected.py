"""A Trainer that receives the model and the data loaders, and builds the optimizer and scheduler itself.

Imitates minGPT's mingpt/trainer.py and the many trainers modelled on it: `Trainer(config, model, train_loader,
val_loader)`, `self.device` picked in `__init__` and read there (`model.to(self.device)`, a print), the optimizer and
a warm-up LambdaLR built from `self.model`, `run()` driving the epochs, an `evaluate()` method under no_grad.
"""
import argparse
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


class Classifier(nn.Module):
    def __init__(self, n_in=24, n_hidden=64, n_classes=6):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, n_hidden), nn.ReLU(), nn.Linear(n_hidden, n_classes))

    def forward(self, x):
        return self.net(x)


class Trainer:
    @staticmethod
    def get_default_config():
        return SimpleNamespace(max_epochs=3, learning_rate=3e-3, betas=(0.9, 0.95), weight_decay=0.1, warmup_steps=20, grad_norm_clip=1.0)

    def __init__(self, config, model, train_loader, val_loader):
        self.accelerator = Accelerator()
        self.config = config
        self.device = self.accelerator.device
        self.model = model
        self.accelerator.print("running on device", self.device)
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=config.learning_rate, betas=config.betas, weight_decay=config.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps)
        )
        self.model, self.optimizer, self.train_loader, self.val_loader, self.scheduler = self.accelerator.prepare(
            self.model,
            self.optimizer,
            self.train_loader,
            self.val_loader,
            self.scheduler,
        )
        self.iter_num = 0

    def run_epoch(self):
        self.model.train()
        for x, y in self.train_loader:
            logits = self.model(x)
            loss = F.cross_entropy(logits, y)
            self.model.zero_grad(set_to_none=True)
            self.accelerator.backward(loss)
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.grad_norm_clip)
            self.optimizer.step()
            self.scheduler.step()
            self.iter_num += 1
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses, correct = [], 0
        for x, y in self.val_loader:
            logits = self.model(x)
            logits, y = self.accelerator.gather_for_metrics((logits, y))
            losses.append(F.cross_entropy(logits, y, reduction="none"))
            correct += (logits.argmax(-1) == y).sum().item()
        return torch.cat(losses).mean().item(), correct / len(self.val_loader.dataset)

    def run(self):
        val_loss, val_acc = self.evaluate()
        self.accelerator.print(f"iter {self.iter_num}: val loss {val_loss:.5f} val acc {val_acc:.4f}")
        for epoch in range(self.config.max_epochs):
            train_loss = self.run_epoch()
            val_loss, val_acc = self.evaluate()
            self.accelerator.print(f"epoch {epoch} iter {self.iter_num}: train loss {train_loss:.5f} val loss {val_loss:.5f} val acc {val_acc:.4f}")
        self.accelerator.end_training()


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 24, generator=g)
    y = (x[:, :6] + 0.5 * torch.randn(n, 6, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(1234)
    model = Classifier()
    train_loader = DataLoader(make_data(700, seed=1), batch_size=32, shuffle=True)
    val_loader = DataLoader(make_data(270, seed=2), batch_size=64)
    config = Trainer.get_default_config()
    config.max_epochs = args.epochs
    trainer = Trainer(config, model, train_loader, val_loader)
    trainer.run()


if __name__ == "__main__":
    main()
