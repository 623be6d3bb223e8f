import os

import torch
from torch.utils.tensorboard import SummaryWriter


class Logger:
    """Writes scalars and keeps a copy of the model after every epoch."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir)

    def log(self, tag, value, epoch):
        self.writer.add_scalar(tag, value, epoch)

    def save_model(self, model, epoch):
        torch.save(model.state_dict(), os.path.join(self.log_dir, f"model_{epoch}.pt"))
