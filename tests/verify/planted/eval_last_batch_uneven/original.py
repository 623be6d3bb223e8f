"""A regression evaluated on 25 test samples in batches of 10 (the last batch holds 5): the squared error summed per
sample, the sign accuracy counted, and the predicted signs collected as Python numbers, printed before training and
after each epoch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader, label):
    model.eval()
    total, correct, seen, signs = 0.0, 0, 0, []
    with torch.no_grad():
        for inputs, targets in loader:
            output = model(inputs)
            total += ((output - targets) ** 2).sum().item()
            correct += (output.sign() == targets.sign()).sum().item()
            seen += targets.size(0)
            signs += output.sign().flatten().tolist()
    print(f"{label}: test mse {total / len(loader.dataset):.6f} accuracy {correct / seen:.4f} "
          f"positive {signs.count(1.0)} of {len(signs)}")


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 1, generator=g)
    x = torch.randn(64, 8, generator=g)
    y = x @ w + 0.1 * torch.randn(64, 1, generator=g)
    xt = torch.randn(25, 8, generator=g)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    test_loader = DataLoader(TensorDataset(xt, xt @ w), batch_size=10)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.MSELoss()
    evaluate(model, test_loader, "before training")
    for epoch in range(2):
        model.train()
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
        evaluate(model, test_loader, f"epoch {epoch}")


if __name__ == "__main__":
    main()
