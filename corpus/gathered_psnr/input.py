"""A test PSNR averaged over the evaluation loop, the way pytorch/examples' super_resolution writes it: a module-level
script whose `test()` helper computes `mse = criterion(prediction, target)` (a batch's *mean*), then
`psnr = 10 * log10(1 / mse.item())`, sums it and divides by `len(testing_data_loader)`.

The conversion gathers the predictions and targets for metrics, so each pass of the loop holds N processes' batches
and the loop runs 1/N as many times. A PSNR of the pass's mean would be the PSNR of N batches together, which no
division makes the original's: the statements from the mean loss to the sum run once per original batch the pass
holds, and the sum is divided by the original's number of batches, so the printed PSNR is the original's on any
number of processes (100 test samples in batches of 8: 13 batches, the last round uneven and padded).
"""
import argparse
from math import log10

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser(description="super-resolution-style PSNR")
parser.add_argument("--batchSize", type=int, default=16)
parser.add_argument("--testBatchSize", type=int, default=8)
parser.add_argument("--nEpochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--cuda", action="store_true", help="use cuda")
opt = parser.parse_args()

torch.manual_seed(123)
device = torch.device("cuda" if opt.cuda else "cpu")


def make_set(n, seed):
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 1, 4, 4, generator=g)
    high = torch.nn.functional.interpolate(low, scale_factor=2) + 0.05 * torch.randn(n, 1, 8, 8, generator=g)
    return TensorDataset(low, high)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        return self.shuffle(self.conv(x))


training_data_loader = DataLoader(dataset=make_set(64, 0), batch_size=opt.batchSize, shuffle=True)
testing_data_loader = DataLoader(dataset=make_set(100, 1), batch_size=opt.testBatchSize, shuffle=False)
model = Net().to(device)
criterion = nn.MSELoss()
optimizer = optim.Adam(model.parameters(), lr=opt.lr)


def train(epoch):
    epoch_loss = 0
    for iteration, batch in enumerate(training_data_loader, 1):
        input, target = batch[0].to(device), batch[1].to(device)
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
    print("===> Epoch {} Complete: Avg. Loss: {:.4f}".format(epoch, epoch_loss / len(training_data_loader)))


def test(label):
    avg_psnr = 0
    with torch.no_grad():
        for batch in testing_data_loader:
            input, target = batch[0].to(device), batch[1].to(device)

            prediction = model(input)
            mse = criterion(prediction, target)
            psnr = 10 * log10(1 / mse.item())
            avg_psnr += psnr
    print("===> {}: Avg. PSNR: {:.10f} dB".format(label, avg_psnr / len(testing_data_loader)))


test("Before training")
for epoch in range(1, opt.nEpochs + 1):
    train(epoch)
    test("Epoch {}".format(epoch))
