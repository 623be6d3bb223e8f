"""Transfer learning as many Kaggle notebooks write it: the model wraps a pretrained-style backbone and runs its
layers one by one in its own forward, with its own head; the backbone's classifier `fc` is kept but never runs."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator, DistributedDataParallelKwargs


class TinyResNet(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(F.relu(self.bn1(self.conv1(x)))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class LeafModel(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.base_model = TinyResNet()
        self.out = nn.Linear(self.base_model.fc.in_features, num_classes)

    def forward(self, image):
        x = F.relu(self.base_model.bn1(self.base_model.conv1(image)))
        x = self.base_model.layer2(self.base_model.layer1(x))
        return self.out(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    images, labels = torch.randn(128, 3, 16, 16, generator=g), torch.randint(0, 5, (128,), generator=g)
    loader = DataLoader(TensorDataset(images, labels), batch_size=16, shuffle=True)
    model = LeafModel(num_classes=5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(args.epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
