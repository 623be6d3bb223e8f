"""A regression trained by a trainer class that takes its model and optimizer through **kwargs and saves a
checkpoint dict through a helper of another module at the end, as SimCLR's `train` does with
`utils.save_checkpoint`."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--arch", default="mlp")
    args = parser.parse_args()
    torch.manual_seed(0)
    weights = torch.randn(5, 1)
    inputs = torch.randn(64, 5)
    train_loader = DataLoader(TensorDataset(inputs, inputs @ weights), batch_size=8, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    trainer = Trainer(model=model, optimizer=optimizer, args=args, accelerator=accelerator)
    trainer.train(train_loader)
    accelerator.end_training()


if __name__ == "__main__":
    main()
