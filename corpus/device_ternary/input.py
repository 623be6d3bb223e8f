"""Imbalanced classification with a class-weighted loss; the device comes from torch.device("cuda" if ... else "cpu")."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 3
BATCH_SIZE = 40


def imbalanced_dataset(n, seed):
    """Two classes, 80/20, separable along the first feature."""
    g = torch.Generator().manual_seed(seed)
    labels = (torch.rand(n, generator=g) < 0.2).long()
    x = torch.randn(n, 12, generator=g)
    x[:, 0] += 1.5 * labels
    return TensorDataset(x, labels)


def main():
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    dataset = imbalanced_dataset(800, seed=3)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, drop_last=True)

    counts = torch.bincount(dataset.tensors[1], minlength=2).float()
    class_weights = (counts.sum() / (2 * counts)).to(device)  # inverse-frequency weights
    criterion = nn.CrossEntropyLoss(weight=class_weights)

    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Dropout(0.1), nn.Linear(24, 2)).to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-2)

    step = 0
    for epoch in range(EPOCHS):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss = criterion(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % 5 == 0:
                print(f"step {step} loss {loss.item():.6f}")
            step += 1


if __name__ == "__main__":
    main()
