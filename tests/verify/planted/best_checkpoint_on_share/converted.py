"""Wrong: evaluate() counts the correct predictions of the process's shard of the test set and divides by the whole
test set's size: about 1/N of the accuracy, and the best checkpoint is chosen on it."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def evaluate(accelerator, model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for inputs, targets in loader:
            predictions = model(inputs).argmax(dim=1)
            correct += (predictions == targets).sum().item()
    return correct / len(loader.dataset)


def main():
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(320, 12, generator=g)
    labels = (x[:, :3].sum(1) + 0.8 * torch.randn(320, generator=g) > 0).long()
    train = DataLoader(TensorDataset(x[:192], labels[:192]), batch_size=32, shuffle=True)
    test = DataLoader(TensorDataset(x[192:], labels[192:]), batch_size=32)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer, train, test = accelerator.prepare(model, optimizer, train, test)
    best = 0.0
    for epoch in range(3):
        model.train()
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        accuracy = evaluate(accelerator, model, test)
        if accuracy > best:
            best = accuracy
            accelerator.save(accelerator.unwrap_model(model).state_dict(), "best.pt")
    accelerator.end_training()


if __name__ == "__main__":
    main()
