"""Running averages in AverageMeters of the script's own class (the PyTorch ImageNet example's meter), held the ways
training scripts hold them: one meter per name, a dict literal, a dict comprehension over the names, a list, and the
attributes of a SimpleNamespace; each epoch's averages are printed after its loop."""
import argparse
import types

import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self, name=""):
        self.name = name
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    @property
    def global_avg(self):
        return self.sum / max(self.count, 1)


def train_one_epoch(model, loader, optimizer, epoch, accelerator):
    model.train()
    losses = AverageMeter("Loss")
    named = {"loss": AverageMeter(), "lr": AverageMeter()}
    by_name = {name: AverageMeter(name) for name in ("loss", "acc")}
    listed = [AverageMeter(), AverageMeter()]
    stats = types.SimpleNamespace(loss=AverageMeter(), acc=AverageMeter())
    for x, y in loader:
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()

        correct = (out.argmax(1) == y).sum().item()
        losses.update(loss.item(), x.size(0))
        named["loss"].update(loss.item())
        named["lr"].update(optimizer.param_groups[0]["lr"])
        by_name["loss"].update(loss.item(), x.size(0))
        by_name["acc"].update(correct / x.size(0), x.size(0))
        listed[0].update(loss.item(), x.size(0))
        listed[1].update(correct)
        stats.loss.update(loss.item(), x.size(0))
        stats.acc.update((out.argmax(1) == y).float().mean().item())
    losses.sum = accelerator.reduce(torch.tensor(losses.sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    losses.count = accelerator.reduce(torch.tensor(losses.count, device=accelerator.device), "sum").item()
    losses.avg = losses.sum / losses.count
    named["loss"].sum = accelerator.reduce(torch.tensor(named["loss"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    named["loss"].count = accelerator.reduce(torch.tensor(named["loss"].count, device=accelerator.device), "sum").item()
    named["loss"].avg = named["loss"].sum / named["loss"].count
    named["lr"].sum = accelerator.reduce(torch.tensor(named["lr"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    named["lr"].count = accelerator.reduce(torch.tensor(named["lr"].count, device=accelerator.device), "sum").item()
    named["lr"].avg = named["lr"].sum / named["lr"].count
    by_name["loss"].sum = accelerator.reduce(torch.tensor(by_name["loss"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    by_name["loss"].count = accelerator.reduce(torch.tensor(by_name["loss"].count, device=accelerator.device), "sum").item()
    by_name["loss"].avg = by_name["loss"].sum / by_name["loss"].count
    by_name["acc"].sum = accelerator.reduce(torch.tensor(by_name["acc"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    by_name["acc"].count = accelerator.reduce(torch.tensor(by_name["acc"].count, device=accelerator.device), "sum").item()
    by_name["acc"].avg = by_name["acc"].sum / by_name["acc"].count
    listed[0].sum = accelerator.reduce(torch.tensor(listed[0].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    listed[0].count = accelerator.reduce(torch.tensor(listed[0].count, device=accelerator.device), "sum").item()
    listed[0].avg = listed[0].sum / listed[0].count
    listed[1].sum = accelerator.reduce(torch.tensor(listed[1].sum, device=accelerator.device), "sum").item()
    listed[1].count = accelerator.reduce(torch.tensor(listed[1].count, device=accelerator.device), "sum").item()
    listed[1].avg = listed[1].sum / listed[1].count
    stats.loss.sum = accelerator.reduce(torch.tensor(stats.loss.sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    stats.loss.count = accelerator.reduce(torch.tensor(stats.loss.count, device=accelerator.device), "sum").item()
    stats.loss.avg = stats.loss.sum / stats.loss.count
    stats.acc.sum = accelerator.reduce(torch.tensor(stats.acc.sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    stats.acc.count = accelerator.reduce(torch.tensor(stats.acc.count, device=accelerator.device), "sum").item()
    stats.acc.avg = stats.acc.sum / stats.acc.count
    accelerator.print("epoch {} loss {losses.avg:.6f} ({losses.count} samples)".format(epoch, losses=losses))
    accelerator.print(f"epoch {epoch} named {named['loss'].global_avg:.6f} lr {named['lr'].avg:.6f}")
    accelerator.print(f"epoch {epoch} by name", {k: round(meter.avg, 6) for k, meter in by_name.items()})
    accelerator.print(f"epoch {epoch} listed {listed[0].avg:.6f} ({listed[0].count} samples) correct {listed[1].sum}")
    accelerator.print(f"epoch {epoch} stats {stats.loss.avg:.6f} acc {stats.acc.global_avg:.6f}")
    return losses.avg


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, epoch, accelerator)
    accelerator.end_training()


if __name__ == "__main__":
    main()
