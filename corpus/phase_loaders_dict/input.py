"""Train and validation phases over loaders kept in a dict; the training function returns the best model."""
import copy

import torch
import torch.nn as nn
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_set = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
val_set = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
dataloaders = {
    "train": DataLoader(train_set, batch_size=8, shuffle=True),
    "val": DataLoader(val_set, batch_size=8),
}


def train_model(model, optimizer, scheduler, num_epochs=25):
    best_model_wts = copy.deepcopy(model.state_dict())
    best_loss = 1e10
    for epoch in range(num_epochs):
        for phase in ["train", "val"]:
            if phase == "train":
                model.train()
            else:
                model.eval()
            running_loss = 0.0
            epoch_samples = 0
            for inputs, labels in dataloaders[phase]:
                inputs = inputs.to(device)
                labels = labels.to(device)
                optimizer.zero_grad()
                with torch.set_grad_enabled(phase == "train"):
                    loss = nn.functional.mse_loss(model(inputs), labels)
                    if phase == "train":
                        loss.backward()
                        optimizer.step()
                running_loss += loss.item() * inputs.size(0)
                epoch_samples += inputs.size(0)
            if phase == "train":
                scheduler.step()
            epoch_loss = running_loss / epoch_samples
            print(f"epoch {epoch} {phase} loss {epoch_loss:.4f}")
            if phase == "val" and epoch_loss < best_loss:
                best_loss = epoch_loss
                best_model_wts = copy.deepcopy(model.state_dict())
    print(f"best val loss {best_loss:.4f}")
    model.load_state_dict(best_model_wts)
    return model


model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
optimizer_ft = torch.optim.Adam(model.parameters(), lr=1e-2)
exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=2, gamma=0.5)
model = train_model(model, optimizer_ft, exp_lr_scheduler, num_epochs=3)
