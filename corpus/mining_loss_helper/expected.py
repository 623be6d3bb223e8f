"""Online pair mining (siamese-triplet's `OnlineContrastiveLoss` with an all-positive-pairs selector): the pairs are
chosen within each batch, so the loss of a batch depends on which samples share it. The test loop is the helper
module's `test_epoch`, which gets the loss as a parameter."""
import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import fit, test_epoch
from accelify.runtime import Accelerator

accelerator = Accelerator()
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


class AllPositivePairSelector:
    def get_pairs(self, embeddings, labels):
        same = labels[:, None] == labels[None, :]
        return torch.triu(same, diagonal=1).nonzero()


class OnlinePairLoss(nn.Module):
    def __init__(self, pair_selector):
        super().__init__()
        self.pair_selector = pair_selector

    def forward(self, embeddings, target):
        pairs = self.pair_selector.get_pairs(embeddings, target)
        distances = (embeddings[pairs[:, 0]] - embeddings[pairs[:, 1]]).pow(2).sum(1)
        return distances.mean(), len(pairs)


class AveragePairsMetric:
    """Counts the average number of pairs found in the batches."""

    def __init__(self):
        self.values = []

    def __call__(self, outputs, target, loss):
        self.values.append(loss[1])

    def reset(self):
        self.values = []

    def value(self):
        return np.mean(self.values)

    def name(self):
        return "Average pairs"


torch.manual_seed(0)
cuda = torch.cuda.is_available()
train_loader = DataLoader(TensorDataset(torch.randn(64, 6), torch.randint(0, 3, (64,))), batch_size=16, shuffle=True)
test_loader = DataLoader(TensorDataset(torch.randn(48, 6), torch.randint(0, 3, (48,))), batch_size=8)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
loss_fn = OnlinePairLoss(AllPositivePairSelector())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
model, optimizer, train_loader, test_loader = accelerator.prepare(
    model, optimizer, train_loader, test_loader
)
val_loss, _ = test_epoch(test_loader, model, loss_fn, cuda, [], accelerator)
accelerator.print("Before training: validation loss: {:.6f}".format(val_loss / len(test_loader)))
fit(train_loader, test_loader, model, loss_fn, optimizer, args.epochs, cuda, metrics=[AveragePairsMetric()], accelerator=accelerator)
accelerator.end_training()
