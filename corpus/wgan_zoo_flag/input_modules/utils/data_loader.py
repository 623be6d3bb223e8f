import torch
from torch.utils.data import DataLoader, TensorDataset


def get_data_loader(args):
    g = torch.Generator().manual_seed(1)
    train_dataset = TensorDataset(torch.tanh(torch.randn(256, 1, 8, 8, generator=g)), torch.zeros(256))
    test_dataset = TensorDataset(torch.tanh(torch.randn(64, 1, 8, 8, generator=g)), torch.zeros(64))
    train_dataloader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True)
    test_dataloader = DataLoader(test_dataset, batch_size=args.batch_size, shuffle=True)
    return train_dataloader, test_dataloader
