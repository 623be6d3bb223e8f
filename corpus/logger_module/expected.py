"""pytorch-beginner's convolution network, in its layout: module-level training, a `Logger` class of its own
(`logger.py`, wrapping a summary writer) created once and written at every step, and epoch sums of `loss * batch`
and correct counts divided by the data set's length (`len(train_dataset)`), with a progress line inside the loop.

On N processes the logger is made on the main process only (`None` elsewhere) and every statement writing to it runs
there: one log of the training, not N. The epoch sums are reduced with "sum" after the loop (the data set is what the
loader walks, whatever its type), so the printed epoch loss and accuracy are the whole data set's.
"""
import argparse
import os

import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

from logger import Logger
from accelify.runtime import Accelerator

accelerator = Accelerator(cpu=True)
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

batch_size = 16
learning_rate = 1e-1
num_epoches = args.epochs


def to_np(x):
    return x.cpu().data.numpy()


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=g)
    return TensorDataset(x, (x.mean((1, 2, 3)) > 0).long())


torch.manual_seed(0)
train_dataset = make_dataset(96, 0)
train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True)


class Cnn(nn.Module):
    def __init__(self, in_dim, n_class):
        super(Cnn, self).__init__()
        self.conv = nn.Sequential(nn.Conv2d(in_dim, 4, 3, padding=1), nn.ReLU(True), nn.MaxPool2d(2, 2))
        self.fc = nn.Linear(64, n_class)

    def forward(self, x):
        out = self.conv(x)
        return self.fc(out.view(out.size(0), -1))


model = Cnn(1, 2)
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(model.parameters(), lr=learning_rate)
model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
logger = Logger("./logs") if accelerator.is_main_process else None
for epoch in range(num_epoches):
    running_loss = 0.0
    running_acc = 0.0
    for i, data in enumerate(train_loader, 1):
        img, label = data
        out = model(img)
        loss = criterion(out, label)
        running_loss += loss.item() * label.size(0)
        _, pred = torch.max(out, 1)
        num_correct = (pred == label).sum()
        running_acc += num_correct.item()
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        # ========================= Log ======================
        step = epoch * len(train_loader) + i
        info = {"loss": loss.item(), "accuracy": (pred == label).float().mean().item()}
        for tag, value in info.items():
            if accelerator.is_main_process:
                logger.scalar_summary(tag, value, step)
        for tag, value in accelerator.unwrap_model(model).named_parameters():
            if accelerator.is_main_process:
                logger.histo_summary(tag.replace(".", "/"), to_np(value), step)
        if i % 4 == 0:
            accelerator.print("[{}/{}] Loss: {:.6f}, Acc: {:.6f}".format(
                epoch + 1, num_epoches, running_loss / (batch_size * i), running_acc / (batch_size * i)))
    running_loss = accelerator.reduce(torch.tensor(running_loss, dtype=torch.float64, device=accelerator.device), "sum").item()
    running_acc = accelerator.reduce(torch.tensor(running_acc, dtype=torch.float64, device=accelerator.device), "sum").item()
    epoch_loss = running_loss / (len(train_dataset))
    if accelerator.is_main_process:
        logger.scalar_summary("epoch/loss", epoch_loss, epoch + 1)
    accelerator.print("Finish {} epoch, Loss: {:.6f}, Acc: {:.6f}".format(
        epoch + 1, epoch_loss, running_acc / (len(train_dataset))))

with open(os.path.join("logs", "events.txt")) as f:
    logged = sum(1 for line in f if line.startswith("epoch/"))
accelerator.print(f"epoch lines logged: {logged}")
accelerator.wait_for_everyone()
accelerator.save(accelerator.unwrap_model(model).state_dict(), "./cnn.pth")
accelerator.end_training()
