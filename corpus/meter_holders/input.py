"""Running averages in AverageMeters of the script's own class (the PyTorch ImageNet example's meter), held the ways
training scripts hold them: one meter per name, a dict literal, a dict comprehension over the names, a list, and the
attributes of a SimpleNamespace; each epoch's averages are printed after its loop."""
import argparse
import types

import torch
from torch.utils.data import DataLoader, TensorDataset


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


def train_one_epoch(model, loader, optimizer, epoch):
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
        loss.backward()
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
    print("epoch {} loss {losses.avg:.6f} ({losses.count} samples)".format(epoch, losses=losses))
    print(f"epoch {epoch} named {named['loss'].global_avg:.6f} lr {named['lr'].avg:.6f}")
    print(f"epoch {epoch} by name", {k: round(meter.avg, 6) for k, meter in by_name.items()})
    print(f"epoch {epoch} listed {listed[0].avg:.6f} ({listed[0].count} samples) correct {listed[1].sum}")
    print(f"epoch {epoch} stats {stats.loss.avg:.6f} acc {stats.acc.global_avg:.6f}")
    return losses.avg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, epoch)


if __name__ == "__main__":
    main()
