"""Data helpers: a synthetic tabular data set, its feature statistics, and normalisation."""
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset


def make_dataset(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = 3.0 + 2.0 * torch.randn(n, 6, generator=g)
    w = torch.linspace(-0.5, 0.5, 6)
    y = ((x - 3.0) @ w > 0).long()
    return TensorDataset(x, y)


def compute_mean_std(dataset, batch_size=128):
    """Per-feature mean and standard deviation, in one pass over the data."""
    loader = DataLoader(dataset, batch_size=batch_size)
    total = torch.zeros(6)
    total_sq = torch.zeros(6)
    count = 0
    for x, _ in loader:
        total += x.sum(0)
        total_sq += (x ** 2).sum(0)
        count += x.size(0)
    mean = total / count
    return mean, (total_sq / count - mean ** 2).sqrt()


def count_labels(dataset):
    """How many samples of each class (a check run by hand, not by training)."""
    counts = torch.zeros(2, dtype=torch.long)
    for _, y in DataLoader(dataset, batch_size=256):
        counts += torch.bincount(y, minlength=2)
    return counts


class Normalized(Dataset):
    def __init__(self, base, mean, std):
        self.base = base
        self.mean = mean
        self.std = std

    def __len__(self):
        return len(self.base)

    def __getitem__(self, index):
        x, y = self.base[index]
        return (x - self.mean) / self.std, y
