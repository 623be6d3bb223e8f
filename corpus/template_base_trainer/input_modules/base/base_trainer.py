import os

import torch

__all__ = ["BaseTrainer"]


class BaseTrainer:
    """The epoch loop and the checkpoints; a subclass trains one epoch (``_train_epoch``)."""

    def __init__(self, model, criterion, optimizer, config):
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.epochs = config["trainer"]["epochs"]
        self.checkpoint_dir = config["trainer"]["save_dir"]

    def _train_epoch(self, epoch):
        raise NotImplementedError

    def train(self):
        for epoch in range(1, self.epochs + 1):
            log = self._train_epoch(epoch)
            print(f"epoch {epoch} loss {log['loss']:.6f} lr {log['lr']:.5f}")
            self._save_checkpoint(epoch)

    def _save_checkpoint(self, epoch):
        state = {"epoch": epoch, "state_dict": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        os.makedirs(self.checkpoint_dir, exist_ok=True)
        torch.save(state, os.path.join(self.checkpoint_dir, f"checkpoint-epoch{epoch}.pth"))
