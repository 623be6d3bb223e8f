import torch.nn.functional as F
from torch.utils.tensorboard import SummaryWriter


class Trainer:
    """Trains the model it is handed, and logs each step to a TensorBoard writer of its own."""

    def __init__(self, model, optimizer, log_dir):
        self.model = model
        self.optimizer = optimizer
        self.writer = SummaryWriter(log_dir)
        self.step = 0

    def train_epoch(self, loader, epoch):
        self.model.train()
        for x, y in loader:
            loss = F.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.writer.add_scalar("train/loss", loss.item(), self.step)
            self.step += 1
