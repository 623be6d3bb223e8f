'''Train CIFAR10 with PyTorch.

kuangliu/pytorch-cifar main.py layout on synthetic 3x8x8 images: module-level script, a string `device`,
`torch.nn.DataParallel(net)` and `cudnn.benchmark` when on CUDA, `--resume` from ./checkpoint/ckpt.pth, train(epoch)
and test(epoch) reading module globals, and the best checkpoint saved from test() (creating ./checkpoint if missing).
'''
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F
import torch.backends.cudnn as cudnn

import os
import argparse
from accelify.runtime import Accelerator


accelerator = Accelerator(split_batches=True)


class SimpleNet(nn.Module):
    def __init__(self, num_classes=10):
        super(SimpleNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.linear = nn.Linear(32, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def progress_bar(current, total, msg):
    if current == total - 1:
        accelerator.print(' [%d/%d] %s' % (current + 1, total, msg))


def synthetic_cifar(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    prototypes = torch.randn(10, 3, 8, 8, generator=torch.Generator().manual_seed(99))
    return torch.utils.data.TensorDataset(prototypes[labels] + 1.2 * torch.randn(n, 3, 8, 8, generator=g), labels)


parser = argparse.ArgumentParser(description='PyTorch CIFAR10 Training')
parser.add_argument('--lr', default=0.1, type=float, help='learning rate')
parser.add_argument('--epochs', default=3, type=int, help='number of epochs')
parser.add_argument('--resume', '-r', action='store_true',
                    help='resume from checkpoint')
parser.add_argument('--seed', default=0, type=int)
args = parser.parse_args()

torch.manual_seed(args.seed)
device = accelerator.device
best_acc = 0  # best test accuracy
start_epoch = 0  # start from epoch 0 or last checkpoint epoch

# Data
accelerator.print('==> Preparing data..')
trainset = synthetic_cifar(640, seed=1)
trainloader = torch.utils.data.DataLoader(
    trainset, batch_size=64, shuffle=True, num_workers=0)

testset = synthetic_cifar(250, seed=2)
testloader = torch.utils.data.DataLoader(
    testset, batch_size=50, shuffle=False, num_workers=0)

classes = ('plane', 'car', 'bird', 'cat', 'deer',
           'dog', 'frog', 'horse', 'ship', 'truck')

# Model
accelerator.print('==> Building model..')
net = SimpleNet()
if device.type == 'cuda':
    cudnn.benchmark = True

if args.resume:
    # Load checkpoint.
    accelerator.print('==> Resuming from checkpoint..')
    assert os.path.isdir('checkpoint'), 'Error: no checkpoint directory found!'
    checkpoint = torch.load('./checkpoint/ckpt.pth', map_location="cpu")
    net.load_state_dict(checkpoint['net'])
    best_acc = checkpoint['acc']
    start_epoch = checkpoint['epoch']
    accelerator.print('==> Resumed at epoch %d, best acc %.3f' % (start_epoch, best_acc))

criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=args.lr,
                      momentum=0.9, weight_decay=5e-4)
net, optimizer, trainloader, testloader = accelerator.prepare(
    net, optimizer, trainloader, testloader
)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)


# Training
def train(epoch):
    accelerator.print('\nEpoch: %d' % epoch)
    net.train()
    train_loss = 0
    correct = 0
    total = 0
    for batch_idx, (inputs, targets) in enumerate(trainloader):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)
        accelerator.backward(loss)
        optimizer.step()

        train_loss += loss.item()
        _, predicted = outputs.max(1)
        total += targets.size(0)
        correct += predicted.eq(targets).sum().item()

        progress_bar(batch_idx, len(trainloader), 'Loss: %.3f | Acc: %.3f%% (%d/%d)'
                     % (train_loss/(batch_idx+1), 100.*correct/total, correct, total))


def test(epoch):
    global best_acc
    net.eval()
    test_loss = 0
    correct = 0
    total = 0
    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(testloader):
            outputs = net(inputs)
            outputs, targets = accelerator.gather_for_metrics((outputs, targets))
            loss = criterion(outputs, targets)

            test_loss += loss.item()
            _, predicted = outputs.max(1)
            total += targets.size(0)
            correct += predicted.eq(targets).sum().item()

            progress_bar(batch_idx, len(testloader), 'Loss: %.3f | Acc: %.3f%% (%d/%d)'
                         % (test_loss/(batch_idx+1), 100.*correct/total, correct, total))

    # Save checkpoint.
    acc = 100.*correct/total
    if acc > best_acc:
        accelerator.print('Saving..')
        state = {
            'net': accelerator.unwrap_model(net).state_dict(),
            'acc': acc,
            'epoch': epoch,
        }
        with accelerator.main_process_first():
            if not os.path.isdir('checkpoint'):
                os.mkdir('checkpoint')
        accelerator.wait_for_everyone()
        accelerator.save(state, './checkpoint/ckpt.pth')
        best_acc = acc


for epoch in range(start_epoch, start_epoch+args.epochs):
    train(epoch)
    test(epoch)
    scheduler.step()
accelerator.end_training()
