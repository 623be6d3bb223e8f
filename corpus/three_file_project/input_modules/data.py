"""Datasets and loaders: tiny synthetic 8x8 "images" of three shapes."""
import torch
from torch.utils.data import DataLoader, TensorDataset

CLASSES = ("bar", "cross", "dot")


def synthetic_shapes(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(CLASSES), (n,), generator=g)
    images = 0.3 * torch.randn(n, 1, 8, 8, generator=g)
    images[labels == 0, 0, 3:5, :] += 1.0          # a horizontal bar
    images[labels == 1, 0, 3:5, :] += 0.5          # a cross
    images[labels == 1, 0, :, 3:5] += 0.5
    images[labels == 2, 0, 2:6, 2:6] += 0.8        # a dot
    return TensorDataset(images, labels)


def make_loaders(batch_size, num_workers=0):
    train_set = synthetic_shapes(600, seed=1)
    test_set = synthetic_shapes(250, seed=2)
    train_dl = DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=num_workers)
    test_dl = DataLoader(test_set, batch_size=2 * batch_size, shuffle=False, num_workers=num_workers)
    return train_dl, test_dl, CLASSES
