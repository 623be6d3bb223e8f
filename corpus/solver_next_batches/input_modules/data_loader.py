"""The data: one helper that builds a loader and returns it by name, called once per data set."""
import torch
from torch.utils import data


def get_loader(n, seed, batch_size=16):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 3, 8, 8, generator=g)
    labels = (images.mean(dim=(2, 3)) > 0).float()
    dataset = data.TensorDataset(images, labels)
    data_loader = data.DataLoader(dataset=dataset, batch_size=batch_size, shuffle=True)
    return data_loader
