import os

from torch.utils.tensorboard import SummaryWriter


class Logger:
    """Writes scalars and keeps a copy of the model after every epoch."""

    def __init__(self, log_dir, accelerator):
        self.accelerator = accelerator
        self.log_dir = log_dir
        self.writer = SummaryWriter(log_dir) if self.accelerator.is_main_process else None

    def log(self, tag, value, epoch):
        if self.accelerator.is_main_process:
            self.writer.add_scalar(tag, value, epoch)

    def save_model(self, model, epoch):
        self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), os.path.join(self.log_dir, f"model_{epoch}.pt"))
