"""The `fit` helper of siamese-triplet's trainer.py (copied widely): the scheduler it is handed is caught up for
`start_epoch` epochs when resuming, then stepped once per epoch."""
import torch


def fit(train_loader, model, loss_fn, optimizer, scheduler, n_epochs, start_epoch=0, *, accelerator):
    for epoch in range(0, start_epoch):
        scheduler.step()

    for epoch in range(start_epoch, n_epochs):
        accelerator.print("epoch {} lr {:.0e}".format(epoch, optimizer.param_groups[0]["lr"]))
        train_loss = train_epoch(train_loader, model, loss_fn, optimizer, accelerator)
        scheduler.step()
        accelerator.print("epoch {} train loss {:.4f}".format(epoch, train_loss))


def train_epoch(train_loader, model, loss_fn, optimizer, accelerator):
    model.train()
    total_loss = 0
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        outputs = model(data)
        loss = loss_fn(outputs, target)
        total_loss += loss.item()
        accelerator.backward(loss)
        optimizer.step()
    total_loss = accelerator.reduce(torch.tensor(total_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
    total_loss /= batch_idx + 1
    return total_loss
