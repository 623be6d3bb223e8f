"""Right: each process validates its shard; predictions and targets are gathered before counting."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(480, 12, generator=g)
    labels = (x[:, :3].sum(1) + 0.8 * torch.randn(480, generator=g) > 0).long()
    train = DataLoader(TensorDataset(x[:320], labels[:320]), batch_size=16, shuffle=True)
    valid = DataLoader(TensorDataset(x[320:], labels[320:]), batch_size=16)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer, train, valid = accelerator.prepare(model, optimizer, train, valid)
    best = 0.0
    for epoch in range(10):
        model.train()
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for inputs, targets in valid:
                predictions, targets = accelerator.gather_for_metrics((model(inputs).argmax(dim=1), targets))
                correct += (predictions == targets).sum().item()
                total += targets.size(0)
        accuracy = 100.0 * correct / total
        accelerator.print(f"epoch {epoch}: val accuracy {accuracy:.2f}% over {len(valid)} batches")
        if accuracy > best:
            best = accuracy
            accelerator.print(f"new best {best:.2f}%")


if __name__ == "__main__":
    main()
