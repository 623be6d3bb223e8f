"""A right conversion whose gradients differ from the original's by float32 rounding: a small BatchNorm network on
random labels, trained hard (lr 0.1, momentum). Once the two runs' parameters differ in their last bits (step 2),
their float32 gradients round differently by ~1e-3; in float64 they agree to 1e-14 (pytorch-cifar100's ResNet18)."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
train_set = TensorDataset(torch.randn(64, 3, 16, 16, generator=g), torch.randint(0, 100, (64,), generator=g))
train_loader = DataLoader(train_set, batch_size=32, shuffle=True)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


net = nn.Sequential(block(3, 64), block(64, 64), block(64, 128), block(128, 128),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 100))
loss_function = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
net, optimizer, train_loader = accelerator.prepare(net, optimizer, train_loader)

for epoch in range(2):
    net.train()
    for images, labels in train_loader:
        optimizer.zero_grad()
        loss = loss_function(net(images), labels)
        accelerator.backward(loss)
        optimizer.step()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
accelerator.end_training()
