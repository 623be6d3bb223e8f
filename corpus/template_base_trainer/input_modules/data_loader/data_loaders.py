import torch
from torch.utils.data import TensorDataset

from base import BaseDataLoader


class SyntheticDataLoader(BaseDataLoader):
    def __init__(self, batch_size, samples=96, shuffle=True):
        g = torch.Generator().manual_seed(7)
        x = torch.randn(samples, 6, generator=g)
        y = x @ torch.linspace(-1.0, 1.0, 6).unsqueeze(1) + 0.1 * torch.randn(samples, 1, generator=g)
        super().__init__(TensorDataset(x, y), batch_size, shuffle)
