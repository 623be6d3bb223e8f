"""Right: the predictions and targets are gathered for metrics (tensors), and so are the predicted signs (a list of
Python numbers, gathered as objects); on N processes the last batch's duplicated rows are dropped, so the sums count
the 25 test samples once."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def evaluate(model, loader, label, accelerator):
    model.eval()
    total, correct, seen, signs = 0.0, 0, 0, []
    with torch.no_grad():
        for inputs, targets in loader:
            output = model(inputs)
            signs += accelerator.gather_for_metrics(output.sign().flatten().tolist())
            output, targets = accelerator.gather_for_metrics((output, targets))
            total += ((output - targets) ** 2).sum().item()
            correct += (output.sign() == targets.sign()).sum().item()
            seen += targets.size(0)
    accelerator.print(f"{label}: test mse {total / len(loader.dataset):.6f} accuracy {correct / seen:.4f} "
                      f"positive {signs.count(1.0)} of {len(signs)}")


def main():
    accelerator = Accelerator()
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
    model, optimizer, train_loader, test_loader = accelerator.prepare(
        model, optimizer, train_loader, test_loader
    )
    criterion = nn.MSELoss()
    evaluate(model, test_loader, "before training", accelerator)
    for epoch in range(2):
        model.train()
        for inputs, targets in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        evaluate(model, test_loader, f"epoch {epoch}", accelerator)
    accelerator.end_training()


if __name__ == "__main__":
    main()
