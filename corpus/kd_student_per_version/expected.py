# Knowledge distillation as research entry points write it: the loader first, then, under a mode test, the student
# and its optimizer in one branch per version, the frozen teacher, and the training through a function; the other
# mode trains the baseline, its model and optimizer built in its own branch.
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def train(model, optimizer, dataloader):
    model.train()
    total = 0.0
    for x, y in dataloader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        total += loss.item()
    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean").item()
    return total / len(dataloader)


def train_kd(model, teacher_model, optimizer, dataloader):
    model.train()
    teacher_model.eval()
    total = 0.0
    for x, y in dataloader:
        out = model(x)
        with torch.no_grad():
            soft = teacher_model(x)
        kd = F.kl_div(F.log_softmax(out / 4, 1), F.softmax(soft / 4, 1), reduction="batchmean")
        loss = kd * 0.9 + F.cross_entropy(out, y) * 0.1
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        total += loss.item()
    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean").item()
    return total / len(dataloader)


if __name__ == "__main__":
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default="cnn_distill")
    parser.add_argument("--teacher", default="mlp")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    train_dl = DataLoader(data, batch_size=8, shuffle=True)
    if "distill" in args.version:
        if args.version == "cnn_distill":
            model = nn.Linear(4, 2)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        elif args.version == "resnet18_distill":
            model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        if args.teacher == "mlp":
            teacher_model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)).to(accelerator.device)
        for epoch in range(3):
            accelerator.print(f"epoch {epoch} loss {train_kd(model, teacher_model, optimizer, train_dl):.4f}")
    else:
        if args.version == "cnn":
            model = nn.Linear(4, 2)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        for epoch in range(3):
            accelerator.print(f"epoch {epoch} loss {train(model, optimizer, train_dl):.4f}")
    accelerator.end_training()
