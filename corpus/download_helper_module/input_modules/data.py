"""A data module the way data-set helpers are written: a `Dataset` that downloads its files when asked
(`download=True`: here it makes its folder and draws a fixed synthetic set), and a `get_loader` helper that builds it
and its loader."""
import os

import torch
from torch.utils.data import DataLoader, Dataset


class Digits(Dataset):
    def __init__(self, root, train=True, download=False):
        if download and not os.path.exists(root):
            os.makedirs(root)
        g = torch.Generator().manual_seed(0 if train else 1)
        self.x = torch.randn(96, 10, generator=g)
        self.y = (self.x[:, :5].sum(1) > self.x[:, 5:].sum(1)).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def get_loader(root, batch_size, train=True):
    data = Digits(root, train=train, download=True)
    return DataLoader(data, batch_size=batch_size, shuffle=train)
