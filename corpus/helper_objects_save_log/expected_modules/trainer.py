import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter


class Trainer:
    """Trains the model it is handed, and logs each step to a TensorBoard writer of its own."""

    def __init__(self, model, optimizer, log_dir, accelerator):
        self.accelerator = accelerator
        self.model = model
        self.optimizer = optimizer
        self.writer = SummaryWriter(log_dir) if self.accelerator.is_main_process else None
        self.step = 0

    def train_epoch(self, loader, epoch):
        self.model.train()
        for x, y in loader:
            loss = F.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            self.accelerator.backward(loss)
            self.optimizer.step()
            if self.accelerator.is_main_process:
                self.writer.add_scalar("train/loss", loss.item(), self.step)
            self.step += 1
