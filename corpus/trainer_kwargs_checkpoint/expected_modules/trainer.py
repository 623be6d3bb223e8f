import torch.nn.functional as F

from utils import save_checkpoint


class Trainer:
    """Holds what it is handed by keyword, trains, and saves the last weights in a checkpoint dict."""

    def __init__(self, *args, accelerator, **kwargs):
        self.accelerator = accelerator
        self.args = kwargs["args"]
        self.model = kwargs["model"]
        self.optimizer = kwargs["optimizer"]

    def train(self, train_loader):
        for epoch in range(self.args.epochs):
            for x, y in train_loader:
                loss = F.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                self.accelerator.backward(loss)
                self.optimizer.step()
            self.accelerator.print(f"epoch {epoch} last loss {loss.item():.6f}")
        checkpoint_name = "checkpoint_{:04d}.pth.tar".format(self.args.epochs)
        if self.accelerator.is_main_process:
            save_checkpoint({
                "epoch": self.args.epochs,
                "arch": self.args.arch,
                "state_dict": self.accelerator.unwrap_model(self.model).state_dict(),
                "optimizer": self.optimizer.state_dict(),
            }, is_best=False, filename=checkpoint_name)
