import torch
import torch.nn.functional as F


class Trainer:
    """Holds what it is handed by keyword; steps the schedule after each epoch, as SimCLR's `train` does."""

    def __init__(self, *args, **kwargs):
        self.args = kwargs["args"]
        self.model = kwargs["model"]
        self.optimizer = kwargs.get("optimizer")
        self.scheduler = kwargs.pop("scheduler", None)

    def train(self, train_loader):
        for epoch in range(self.args.epochs):
            self.model.train()
            correct = 0
            for x, y in train_loader:
                logits = self.model(x)
                loss = F.cross_entropy(logits, y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                correct += (logits.argmax(1) == y).sum().item()
            self.scheduler.step()
            print(f"epoch {epoch} lr {self.scheduler.get_last_lr()[0]:.6f} loss {loss.item():.4f} correct {correct}")
