"""What every trainer of the collection shares: its data and a summary of a network."""
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelerate import PartialState


def dataloader(batch_size):
    g = torch.Generator().manual_seed(1)
    samples = torch.tanh(torch.randn(128, 16, generator=g))
    return DataLoader(TensorDataset(samples, torch.zeros(128)), batch_size=batch_size, shuffle=True)


def print_network(net):
    num_params = sum(p.numel() for p in net.parameters())
    PartialState().print('Total number of parameters: %d' % num_params)
