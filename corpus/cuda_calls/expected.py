"""Older-style training script: `args.cuda` from --no-cuda, explicit .cuda() calls guarded by it."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

parser = argparse.ArgumentParser(description="sequence classifier")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
parser.add_argument("--seed", type=int, default=1)
args = parser.parse_args()
accelerator = Accelerator(cpu=args.no_cuda)
args.cuda = not args.no_cuda and torch.cuda.is_available()

torch.manual_seed(args.seed)
if args.cuda:
    torch.cuda.manual_seed(args.seed)

kwargs = {"num_workers": 1, "pin_memory": True} if args.cuda else {}


def make_sequences(n, seed):
    """Sequences of 10 steps x 6 features; the label says whether the running sum ends positive."""
    g = torch.Generator().manual_seed(seed)
    seqs = torch.randn(n, 10, 6, generator=g)
    labels = (seqs.sum(dim=(1, 2)) > 0).long()
    return TensorDataset(seqs, labels)


train_loader = DataLoader(make_sequences(640, 11), batch_size=args.batch_size, shuffle=True, **kwargs)


class GRUClassifier(nn.Module):
    def __init__(self):
        super(GRUClassifier, self).__init__()
        self.gru = nn.GRU(6, 16, batch_first=True)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        _, h = self.gru(x)
        return F.log_softmax(self.head(h[-1]), dim=1)


model = GRUClassifier()

optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)


def train(epoch):
    model.train()
    total = 0.0
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        accelerator.backward(loss)
        optimizer.step()
        total += loss.item()
    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean").item()
    accelerator.print("Train Epoch: {} Average loss: {:.6f}".format(epoch, total / len(train_loader)))


for epoch in range(1, args.epochs + 1):
    train(epoch)
accelerator.end_training()
