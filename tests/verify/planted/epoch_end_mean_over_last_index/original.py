"""A regression whose epoch is 20 batches; at each epoch's end the validation loss is averaged as `sum / k`, with `k`
the last `enumerate` index (an off-by-one many authors write), and printed."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(480, 8, generator=g)
    y = x[:, :2].sum(1, keepdim=True) + 0.3 * torch.randn(480, 1, generator=g)
    train = DataLoader(TensorDataset(x[:320], y[:320]), batch_size=16, shuffle=True)
    valid = DataLoader(TensorDataset(x[320:], y[320:]), batch_size=16)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(10):
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
        valid_loss = 0.0
        with torch.no_grad():
            for k, (inputs, targets) in enumerate(valid):
                valid_loss += nn.functional.mse_loss(model(inputs), targets).item()
        print(f"epoch {epoch} | valid loss {valid_loss / k:.5f}")


if __name__ == "__main__":
    main()
