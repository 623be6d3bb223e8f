"""The entry script of a StarGAN-style project: a loader per data set (either may be left None), handed to `Solver`.

Imitates yunjey/stargan's main.py: `celeba_loader = None; rafd_loader = None`, each built by `get_loader(...)` when the
`--dataset` flag asks for it, then `Solver(celeba_loader, rafd_loader, config)` and `solver.train()`.
"""
import argparse

import torch

from data_loader import get_loader
from solver import Solver


def main(config):
    torch.manual_seed(config.seed)
    celeba_loader = None
    rafd_loader = None
    if config.dataset in ['CelebA', 'Both']:
        celeba_loader = get_loader(96, seed=1, batch_size=config.batch_size)
    if config.dataset in ['RaFD', 'Both']:
        rafd_loader = get_loader(64, seed=2, batch_size=config.batch_size)
    solver = Solver(celeba_loader, rafd_loader, config)
    solver.train()


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--dataset', type=str, default='CelebA', choices=['CelebA', 'RaFD', 'Both'])
    parser.add_argument('--batch_size', type=int, default=8)
    parser.add_argument('--num_iters', type=int, default=16)
    parser.add_argument('--n_critic', type=int, default=2)
    parser.add_argument('--log_step', type=int, default=4)
    parser.add_argument('--seed', type=int, default=0)
    config = parser.parse_args()
    main(config)
