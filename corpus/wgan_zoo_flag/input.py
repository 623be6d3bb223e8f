"""The entry of a WGAN project laid out like Zeleni9/pytorch-wgan: `--model` picks one model class (each in a module of
the `models` package); the class builds its networks and optimizers in `__init__`, and main() hands it the loader
in `model.train(train_loader)`."""
import argparse

import torch

from models.wgan_clipping import WGAN_CP
from models.wgan_gradient_penalty import WGAN_GP
from utils.data_loader import get_data_loader


def parse_args():
    parser = argparse.ArgumentParser(description="Pytorch implementation of GAN models.")
    parser.add_argument('--model', type=str, default='WGAN-GP', choices=['WGAN-CP', 'WGAN-GP'])
    parser.add_argument('--is_train', type=str, default='True')
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--generator_iters', type=int, default=6)
    args = parser.parse_args()
    args.is_train = True if args.is_train == 'True' else False
    return args


def main(args):
    torch.manual_seed(0)
    model = None
    if args.model == 'WGAN-CP':
        model = WGAN_CP(args)
    elif args.model == 'WGAN-GP':
        model = WGAN_GP(args)
    else:
        print("Model type non-existing. Try again.")
        exit(-1)

    # Load datasets to train and test loaders
    train_loader, test_loader = get_data_loader(args)

    # Start model training
    if args.is_train:
        model.train(train_loader)
    else:
        model.evaluate(test_loader)


if __name__ == '__main__':
    main(parse_args())
