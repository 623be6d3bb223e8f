"""A classifier trained by a trainer class that takes its objects through **kwargs (SimCLR's
`SimCLR(model=model, optimizer=optimizer, scheduler=scheduler, args=args)`), with a learning-rate schedule
stepped once per epoch inside the trainer's loop."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    torch.manual_seed(0)
    centers = torch.randn(3, 6)
    labels = torch.randint(0, 3, (96,))
    dataset = TensorDataset(centers[labels] + 0.5 * torch.randn(96, 6), labels)
    train_loader = DataLoader(dataset, batch_size=16, shuffle=True, drop_last=True)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    trainer = Trainer(model=model, optimizer=optimizer, scheduler=scheduler, args=args, accelerator=accelerator)
    trainer.train(train_loader)
    accelerator.end_training()


if __name__ == "__main__":
    main()
