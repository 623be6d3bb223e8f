"""The entry of a GAN collection laid out like znxlwm/pytorch-generative-model-collections: one trainer class per
module, one of them built per run by `--gan_type`; each class builds its networks, optimizers and loader in
`__init__` and trains in `train()`."""
import argparse

import torch

from gan import GAN
from lsgan import LSGAN
from accelify.runtime import PartialState


def parse_args():
    parser = argparse.ArgumentParser(description="GAN collection")
    parser.add_argument('--gan_type', type=str, default='GAN', choices=['GAN', 'LSGAN'])
    parser.add_argument('--epoch', type=int, default=2)
    parser.add_argument('--batch_size', type=int, default=16)
    parser.add_argument('--lrG', type=float, default=0.01)
    parser.add_argument('--lrD', type=float, default=0.01)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(0)

    # declare instance for GAN
    if args.gan_type == 'GAN':
        gan = GAN(args)
    elif args.gan_type == 'LSGAN':
        gan = LSGAN(args)
    else:
        raise Exception("[!] There is no option for " + args.gan_type)

    gan.train()
    PartialState(cpu=True).print(" [*] Training finished!")


if __name__ == '__main__':
    main()
