"""A classifier trained briefly; its test accuracy after each epoch is logged to TensorBoard, never printed."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(320, 12, generator=g)
    labels = (x[:, :3].sum(1) + 0.8 * torch.randn(320, generator=g) > 0).long()
    train = DataLoader(TensorDataset(x[:192], labels[:192]), batch_size=32, shuffle=True)
    test = DataLoader(TensorDataset(x[192:], labels[192:]), batch_size=32)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    writer = SummaryWriter("runs/classifier")
    for epoch in range(2):
        model.train()
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for inputs, targets in test:
                predictions = model(inputs).argmax(dim=1)
                correct += (predictions == targets).sum().item()
                total += targets.size(0)
        writer.add_scalar("test/accuracy", correct / total, epoch)
    writer.close()


if __name__ == "__main__":
    main()
