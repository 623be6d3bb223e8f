"""Train and eval functions used in main.py (DeiT / DETR engine.py style)."""
import math
import sys

import torch


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

    @property
    def global_avg(self):
        return self.sum / max(self.count, 1)


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.reshape(1, -1).expand_as(pred))
    return [correct[:k].reshape(-1).float().sum(0) * 100.0 / batch_size for k in topk]


def train_one_epoch(model, criterion, data_loader, optimizer, accelerator, epoch, max_norm=0):
    model.train()
    meters = {"loss": AverageMeter(), "lr": AverageMeter()}

    for samples, targets in data_loader:
        outputs = model(samples)
        loss = criterion(outputs, targets)
        loss_value = loss.item()

        if not math.isfinite(loss_value):
            print("Loss is {}, stopping training".format(loss_value))
            sys.exit(1)

        optimizer.zero_grad()
        accelerator.backward(loss)
        if max_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()

        meters["loss"].update(loss_value)
        meters["lr"].update(optimizer.param_groups[0]["lr"])
    meters["loss"].sum = accelerator.reduce(torch.tensor(meters["loss"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    meters["loss"].count = accelerator.reduce(torch.tensor(meters["loss"].count, device=accelerator.device), "sum").item()
    meters["lr"].sum = accelerator.reduce(torch.tensor(meters["lr"].sum, dtype=torch.float64, device=accelerator.device), "sum").item()
    meters["lr"].count = accelerator.reduce(torch.tensor(meters["lr"].count, device=accelerator.device), "sum").item()
    accelerator.print("Epoch: [{}] Averaged stats: loss {:.4f} lr {:.6f}".format(epoch, meters["loss"].global_avg, meters["lr"].global_avg))
    return {k: meter.global_avg for k, meter in meters.items()}


@torch.no_grad()
def evaluate(data_loader, model, accelerator):
    criterion = torch.nn.CrossEntropyLoss()
    meters = {"loss": AverageMeter(), "acc1": AverageMeter(), "acc5": AverageMeter()}

    # switch to evaluation mode
    model.eval()

    for images, target in data_loader:
        # compute output
        output = model(images)
        output, target, images = accelerator.gather_for_metrics((output, target, images))
        loss = criterion(output, target)

        acc1, acc5 = accuracy(output, target, topk=(1, 5))

        batch_size = images.shape[0]
        meters["loss"].update(loss.item(), n=batch_size)
        meters["acc1"].update(acc1.item(), n=batch_size)
        meters["acc5"].update(acc5.item(), n=batch_size)
    accelerator.print("* Acc@1 {top1:.3f} Acc@5 {top5:.3f} loss {losses:.3f}".format(
        top1=meters["acc1"].global_avg, top5=meters["acc5"].global_avg, losses=meters["loss"].global_avg))

    return {k: meter.global_avg for k, meter in meters.items()}
