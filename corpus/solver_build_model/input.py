"""The entry script of a solver project: it builds the loaders and hands them to `Solver`, which builds its model.

Imitates LeeJunHyun/Image_Segmentation's main.py (and the many research repositories laid out like it): `main(config)`
builds the train and validation loaders with a helper, then `solver = Solver(config, train_loader, valid_loader)` and
`solver.train()`; the model and optimizer are built in `Solver.build_model()`, which `__init__` calls.
"""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from solver import Solver


def get_loader(n, seed, batch_size, shuffle):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(n, 1, 8, 8, generator=g)
    masks = (images + 0.3 * torch.randn(n, 1, 8, 8, generator=g) > 0).float()
    return DataLoader(TensorDataset(images, masks), batch_size=batch_size, shuffle=shuffle)


def main(config):
    torch.manual_seed(config.seed)
    train_loader = get_loader(160, seed=1, batch_size=config.batch_size, shuffle=True)
    valid_loader = get_loader(64, seed=2, batch_size=config.batch_size, shuffle=False)
    solver = Solver(config, train_loader, valid_loader)
    solver.train()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    config = parser.parse_args()
    main(config)
