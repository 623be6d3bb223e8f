from base import BaseTrainer

__all__ = ["Trainer"]


class Trainer(BaseTrainer):
    def __init__(self, model, criterion, optimizer, config, data_loader, lr_scheduler=None):
        super().__init__(model, criterion, optimizer, config)
        self.data_loader = data_loader
        self.lr_scheduler = lr_scheduler

    def _train_epoch(self, epoch):
        self.model.train()
        for data, target in self.data_loader:
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(data), target)
            loss.backward()
            self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        return {"loss": loss.item(), "lr": self.optimizer.param_groups[0]["lr"]}
