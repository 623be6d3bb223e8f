import numpy as np


class EarlyStopping:
    """Stops the training when the validation loss has not improved for `patience` epochs; saves the best weights."""

    def __init__(self, patience=7, delta=0.0, path="checkpoint.pt", *, accelerator):
        self.accelerator = accelerator
        self.patience = patience
        self.delta = delta
        self.path = path
        self.counter = 0
        self.best = None
        self.early_stop = False
        self.val_loss_min = np.inf

    def __call__(self, val_loss, model):
        if self.best is None or val_loss < self.best - self.delta:
            self.best = val_loss
            self.save_checkpoint(model)
            self.val_loss_min = val_loss
            self.counter = 0
        else:
            self.counter += 1
            if self.counter >= self.patience:
                self.early_stop = True

    def save_checkpoint(self, model):
        self.accelerator.wait_for_everyone()
        self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), self.path)
