"""A classifier whose epoch is 20 batches; at each epoch's end it validates, prints the accuracy and keeps the best."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(480, 12, generator=g)
    labels = (x[:, :3].sum(1) + 0.8 * torch.randn(480, generator=g) > 0).long()
    train = DataLoader(TensorDataset(x[:320], labels[:320]), batch_size=16, shuffle=True)
    valid = DataLoader(TensorDataset(x[320:], labels[320:]), batch_size=16)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    best = 0.0
    for epoch in range(10):
        model.train()
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for inputs, targets in valid:
                correct += (model(inputs).argmax(dim=1) == targets).sum().item()
                total += targets.size(0)
        accuracy = 100.0 * correct / total
        print(f"epoch {epoch}: val accuracy {accuracy:.2f}% over {len(valid)} batches")
        if accuracy > best:
            best = accuracy
            print(f"new best {best:.2f}%")


if __name__ == "__main__":
    main()
