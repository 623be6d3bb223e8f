"""siamese-triplet's trainer.py (`fit` / `train_epoch` / `test_epoch`), copied widely: whatever the loss is (it is
handed in), the test loop computes it on each batch, sums it, and `fit` divides the sum by `len(val_loader)`."""
import torch


def fit(train_loader, val_loader, model, loss_fn, optimizer, n_epochs, cuda, metrics=[]):
    for epoch in range(n_epochs):
        train_loss = train_epoch(train_loader, model, loss_fn, optimizer, cuda)
        val_loss, metrics = test_epoch(val_loader, model, loss_fn, cuda, metrics)
        val_loss /= len(val_loader)
        print("Epoch: {}/{}. Train loss: {:.6f}. Validation loss: {:.6f}".format(epoch + 1, n_epochs, train_loss, val_loss))
        for metric in metrics:
            print("  {}: {}".format(metric.name(), metric.value()))


def train_epoch(train_loader, model, loss_fn, optimizer, cuda):
    model.train()
    total_loss = 0
    for batch_idx, (data, target) in enumerate(train_loader):
        if cuda:
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        loss_outputs = loss_fn(model(data), target)
        loss = loss_outputs[0] if type(loss_outputs) in (tuple, list) else loss_outputs
        total_loss += loss.item()
        loss.backward()
        optimizer.step()
    total_loss /= batch_idx + 1
    return total_loss


def test_epoch(val_loader, model, loss_fn, cuda, metrics):
    with torch.no_grad():
        for metric in metrics:
            metric.reset()
        model.eval()
        val_loss = 0
        for batch_idx, (data, target) in enumerate(val_loader):
            target = target if len(target) > 0 else None
            if not type(data) in (tuple, list):
                data = (data,)
            if cuda:
                data = tuple(d.cuda() for d in data)
                if target is not None:
                    target = target.cuda()

            outputs = model(*data)

            if type(outputs) not in (tuple, list):
                outputs = (outputs,)
            loss_inputs = outputs
            if target is not None:
                target = (target,)
                loss_inputs += target

            loss_outputs = loss_fn(*loss_inputs)
            loss = loss_outputs[0] if type(loss_outputs) in (tuple, list) else loss_outputs
            val_loss += loss.item()

            for metric in metrics:
                metric(outputs, target, loss_outputs)

    return val_loss, metrics
