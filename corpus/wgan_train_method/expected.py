"""The entry script of a WGAN-GP project laid out like Zeleni9/pytorch-wgan: the model class builds its networks and
optimizers in `__init__`; the script builds the loader and hands it to `model.train(train_loader)`."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from wgan_gp import WGAN_GP


def get_data_loader(args):
    g = torch.Generator().manual_seed(1)
    images = torch.tanh(torch.randn(256, 1, 8, 8, generator=g))
    train_loader = DataLoader(TensorDataset(images, torch.zeros(256)), batch_size=args.batch_size, shuffle=True)
    return train_loader


def main(args):
    torch.manual_seed(args.seed)
    model = WGAN_GP(args)
    train_loader = get_data_loader(args)
    model.train(train_loader)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--generator_iters', type=int, default=6)
    parser.add_argument('--seed', type=int, default=0)
    main(parser.parse_args())
