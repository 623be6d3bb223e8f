"""ImageNet-style training, pytorch/examples imagenet/main.py layout, on synthetic 8x8 images.

`main()` parses the arguments, seeds, and either starts one process per GPU with `mp.spawn(main_worker, ...)`
(`--multiprocessing-distributed`) or calls `main_worker(args.gpu, ...)` itself; `main_worker` picks DDP,
a single GPU (`args.gpu`) or DataParallel, builds the loaders with a DistributedSampler when distributed (and calls
`set_epoch`), trains, validates with `.cuda(args.gpu, non_blocking=True)` batches, and saves a checkpoint (and a
copy of the best one) from the first process of each node.
"""
import argparse
import random
import shutil
import warnings

import torch
import torch.backends.cudnn as cudnn
import torch.nn as nn
import torch.optim
import torch.utils.data
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import TensorDataset
from accelify.runtime import Accelerator


class TinyResNet(nn.Module):
    def __init__(self, num_classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.block(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


models = {"tinyresnet": TinyResNet}

parser = argparse.ArgumentParser(description="PyTorch ImageNet Training")
parser.add_argument("-a", "--arch", metavar="ARCH", default="tinyresnet", choices=sorted(models), help="model architecture")
parser.add_argument("-j", "--workers", default=0, type=int, metavar="N", help="number of data loading workers (default: 0)")
parser.add_argument("--epochs", default=3, type=int, metavar="N", help="number of total epochs to run")
parser.add_argument("--start-epoch", default=0, type=int, metavar="N", help="manual epoch number (useful on restarts)")
parser.add_argument("-b", "--batch-size", default=32, type=int, metavar="N",
                    help="mini-batch size (default: 32), this is the total batch size of all GPUs on the current node "
                         "when using Data Parallel or Distributed Data Parallel")
parser.add_argument("--lr", "--learning-rate", default=0.1, type=float, metavar="LR", help="initial learning rate", dest="lr")
parser.add_argument("--momentum", default=0.9, type=float, metavar="M", help="momentum")
parser.add_argument("--wd", "--weight-decay", default=1e-4, type=float, metavar="W", help="weight decay (default: 1e-4)", dest="weight_decay")
parser.add_argument("-p", "--print-freq", default=5, type=int, metavar="N", help="print frequency (default: 5)")
parser.add_argument("--world-size", default=-1, type=int, help="number of nodes for distributed training")
parser.add_argument("--rank", default=-1, type=int, help="node rank for distributed training")
parser.add_argument("--dist-url", default="tcp://224.66.41.62:23456", type=str, help="url used to set up distributed training")
parser.add_argument("--dist-backend", default="nccl", type=str, help="distributed backend")
parser.add_argument("--seed", default=None, type=int, help="seed for initializing training. ")
parser.add_argument("--gpu", default=None, type=int, help="GPU id to use.")
parser.add_argument("--multiprocessing-distributed", action="store_true",
                    help="Use multi-processing distributed training to launch N processes per node, which has N GPUs.")

best_acc1 = 0


def main():
    args = parser.parse_args()

    if args.seed is not None:
        random.seed(args.seed)
        torch.manual_seed(args.seed)
        cudnn.deterministic = True
        cudnn.benchmark = False

    if args.gpu is not None:
        warnings.warn("You have chosen a specific GPU. This will completely disable data parallelism.")

    args.distributed = args.world_size > 1 or args.multiprocessing_distributed

    if torch.cuda.is_available():
        ngpus_per_node = torch.cuda.device_count()
    else:
        ngpus_per_node = 1
    if args.multiprocessing_distributed:
        # Since we have ngpus_per_node processes per node, the total world_size
        # needs to be adjusted accordingly
        args.world_size = ngpus_per_node * args.world_size
        main_worker(args.gpu, ngpus_per_node, args)
    else:
        # Simply call main_worker function
        main_worker(args.gpu, ngpus_per_node, args)


def main_worker(gpu, ngpus_per_node, args):
    global best_acc1
    accelerator = Accelerator(split_batches=True)
    args.gpu = gpu

    if args.gpu is not None:
        accelerator.print("Use GPU: {} for training".format(args.gpu))

    # create model
    accelerator.print("=> creating model '{}'".format(args.arch))
    model = models[args.arch]()

    if not torch.cuda.is_available():
        accelerator.print("using CPU, this will be slow")

    # DataParallel will divide and allocate batch_size to all available GPUs
    if torch.cuda.is_available():
        if args.gpu:
            device = accelerator.device
        else:
            device = accelerator.device
    else:
        device = accelerator.device
    # define loss function (criterion), optimizer, and learning rate scheduler
    criterion = nn.CrossEntropyLoss().to(device)

    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum, weight_decay=args.weight_decay)

    """Sets the learning rate to the initial LR decayed by 10 every 2 epochs"""
    scheduler = StepLR(optimizer, step_size=2, gamma=0.1)

    cudnn.benchmark = True

    # Data loading code
    train_dataset = fake_images(640, seed=1)
    val_dataset = fake_images(200, seed=2)

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True,
        num_workers=args.workers, pin_memory=True)

    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )

    acc1 = validate(val_loader, model, criterion, args, accelerator)
    accelerator.print("Validation before training: Acc@1 {:.3f}".format(acc1))

    for epoch in range(args.start_epoch, args.epochs):
        # train for one epoch
        train(train_loader, model, criterion, optimizer, epoch, accelerator, args)

        # evaluate on validation set
        acc1 = validate(val_loader, model, criterion, args, accelerator)

        scheduler.step()

        # remember best acc@1 and save checkpoint
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)

        if accelerator.is_main_process:
            save_checkpoint({
                "epoch": epoch + 1,
                "arch": args.arch,
                "state_dict": accelerator.unwrap_model(model).state_dict(),
                "best_acc1": best_acc1,
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict()
            }, is_best)
            accelerator.print("Saved epoch {} (best Acc@1 {:.3f})".format(epoch + 1, best_acc1))
    accelerator.end_training()


def train(train_loader, model, criterion, optimizer, epoch, accelerator, args):
    losses = AverageMeter("Loss")
    top1 = AverageMeter("Acc@1")

    # switch to train mode
    model.train()

    for i, (images, target) in enumerate(train_loader):
        # move data to the same device as model
        # compute output
        output = model(images)
        loss = criterion(output, target)

        # measure accuracy and record loss
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0].item(), images.size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()

        if i % args.print_freq == 0:
            accelerator.print("Epoch: [{}][{:>2d}/{}]\tLoss {:.4f} ({:.4f})\tAcc@1 {:6.2f} ({:6.2f})".format(
                epoch, i, len(train_loader), losses.val, losses.avg, top1.val, top1.avg))


def validate(val_loader, model, criterion, args, accelerator):
    losses = AverageMeter("Loss")
    top1 = AverageMeter("Acc@1")
    top5 = AverageMeter("Acc@5")

    # switch to evaluate mode
    model.eval()

    with torch.no_grad():
        for i, (images, target) in enumerate(val_loader):
            # compute output
            output = model(images)
            output, target, images = accelerator.gather_for_metrics((output, target, images))
            loss = criterion(output, target)

            # measure accuracy and record loss
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0].item(), images.size(0))
            top5.update(acc5[0].item(), images.size(0))

    accelerator.print(" * Acc@1 {top1.avg:.3f} Acc@5 {top5.avg:.3f} Loss {losses.avg:.4f}".format(top1=top1, top5=top5, losses=losses))

    return top1.avg


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


def fake_images(n, seed, num_classes=10):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    patterns = torch.randn(num_classes, 3, 8, 8, generator=torch.Generator().manual_seed(123))
    return TensorDataset(patterns[labels] + 1.5 * torch.randn(n, 3, 8, 8, generator=g), labels)


class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self, name):
        self.name = name
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


if __name__ == "__main__":
    main()
