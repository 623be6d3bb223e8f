"""The entry script of a template project (the layout of victoresque/pytorch-template).

The objects are built from a configuration by name (`config.init_obj('optimizer', torch.optim, params)`); the loop
of one epoch is in `trainer/trainer.py` (`class Trainer(BaseTrainer)`), the epoch loop and the checkpoints in
`base/base_trainer.py`, the loader class in `data_loader/` (a `BaseDataLoader`, itself a DataLoader).
"""
import argparse

import torch

import data_loader.data_loaders as module_data
import model.model as module_arch
from parse_config import ConfigParser
from trainer import Trainer

CONFIG = {
    "arch": {"type": "SmallModel", "args": {"hidden": 16}},
    "data_loader": {"type": "SyntheticDataLoader", "args": {"batch_size": 8}},
    "optimizer": {"type": "SGD", "args": {"lr": 0.05}},
    "lr_scheduler": {"type": "StepLR", "args": {"step_size": 1, "gamma": 0.5}},
    "trainer": {"epochs": 3, "save_dir": "saved"},
}


def main(config):
    data_loader = config.init_obj("data_loader", module_data)
    model = config.init_obj("arch", module_arch)
    criterion = torch.nn.functional.mse_loss
    trainable_params = filter(lambda p: p.requires_grad, model.parameters())
    optimizer = config.init_obj("optimizer", torch.optim, trainable_params)
    lr_scheduler = config.init_obj("lr_scheduler", torch.optim.lr_scheduler, optimizer)
    trainer = Trainer(model, criterion, optimizer, config=config, data_loader=data_loader, lr_scheduler=lr_scheduler)
    trainer.train()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    CONFIG["trainer"]["epochs"] = args.epochs
    main(ConfigParser(CONFIG))
