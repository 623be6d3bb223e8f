# Knowledge distillation with the student and its optimizer made by a builder, one branch per version, called in the
# mode branch that trains (the teacher frozen beside it, wrapped in DataParallel to load weights saved from one).
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


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


def build_student(version):
    if version == "cnn_distill":
        model = nn.Linear(4, 2)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    elif version == "resnet18_distill":
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer


if __name__ == "__main__":
    accelerator = Accelerator(cpu=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", default="cnn_distill")
    parser.add_argument("--teacher", default="mlp")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    train_dl = DataLoader(data, batch_size=8, shuffle=True)
    if "distill" in args.version:
        model, optimizer = build_student(args.version)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        if args.teacher == "mlp":
            teacher_model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
            teacher_model = nn.DataParallel(teacher_model, device_ids=[accelerator.device])  # saved from one: module.*
            teacher_model.load_state_dict({"module." + k: v for k, v in teacher_model.module.state_dict().items()})
        for epoch in range(3):
            accelerator.print(f"epoch {epoch} loss {train_kd(model, teacher_model, optimizer, train_dl):.4f}")
    accelerator.end_training()
