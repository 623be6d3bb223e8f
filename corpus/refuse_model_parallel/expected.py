"""Model parallelism by hand: the two halves of the network live on two devices, and forward moves the activations.

Imitates the PyTorch tutorial "Single-Machine Model Parallel Best Practices" (`self.seq1 = ....to('cuda:0')`,
`self.seq2 = ....to('cuda:1')`, `x.to('cuda:1')` between them) and the scripts built on it, for a model too large for
one GPU; with fewer than two GPUs both halves go to the CPU.
"""
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class ModelParallelNet(nn.Module):
    def __init__(self, dev0, dev1):
        super(ModelParallelNet, self).__init__()
        self.dev0 = dev0
        self.dev1 = dev1
        self.seq1 = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU()).to(dev0)
        self.seq2 = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)).to(dev1)

    def forward(self, x):
        x = self.seq1(x.to(self.dev0))
        return self.seq2(x.to(self.dev1))


def main():
    torch.manual_seed(0)
    dev0, dev1 = ("cuda:0", "cuda:1") if torch.cuda.device_count() > 1 else ("cpu", "cpu")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(480, 16, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)

    model = ModelParallelNet(dev0, dev1)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    for epoch in range(3):
        for inputs, labels in loader:
            optimizer.zero_grad()
            outputs = model(inputs)
            labels = labels.to(outputs.device)
            loss = loss_fn(outputs, labels)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
