"""bfloat16 autocast chosen with a `--dtype` flag (no GradScaler: bf16 does not need one).

Imitates modern fine-tuning scripts (nanoGPT's `dtype`, LitGPT/torchtune's `--precision`): `ptdtype` looked up from
`--dtype`, `torch.autocast(device_type=..., dtype=torch.bfloat16, enabled=...)` around the forward and the loss in
training, and combined with `torch.no_grad()` in one `with` statement in evaluation.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, dim=32, num_classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, dim), nn.SiLU(), nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, num_classes))

    def forward(self, x):
        return self.net(x)


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    y = ((x[:, 0] > 0).long() + 2 * (x[:, 1] * x[:, 2] > 0).long())
    return TensorDataset(x, y)


@torch.no_grad()
def evaluate(model, loader, device, ptdtype):
    model.eval()
    correct, loss_sum = 0, 0.0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=(ptdtype == torch.bfloat16)):
            logits = model(x)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
    model.train()
    return loss_sum / len(loader.dataset), correct / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="bfloat16 runs the forward under autocast")
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    torch.manual_seed(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    train_loader = DataLoader(make_dataset(512, seed=3), batch_size=32, shuffle=True)
    val_loader = DataLoader(make_dataset(192, seed=4), batch_size=64)
    model = Classifier().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    val_loss, val_acc = evaluate(model, val_loader, device, ptdtype)
    print(f"[{args.dtype}] before training: val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
    for epoch in range(args.epochs):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=(ptdtype == torch.bfloat16)):
                logits = model(x)
                loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        val_loss, val_acc = evaluate(model, val_loader, device, ptdtype)
        print(f"[{args.dtype}] epoch {epoch}: loss {loss.item():.5f} val_loss {val_loss:.4f} val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
