"""A regression whose epoch loss (per sample) is written to a log file with logging, never printed."""
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

logger = logging.getLogger(__name__)


def main():
    logging.basicConfig(filename="train.log", level=logging.INFO, format="%(asctime)s %(message)s")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 6, generator=g)
    y = x @ torch.randn(6, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            loss.backward()
            optimizer.step()
            total += loss.item() * inputs.size(0)
        logger.info("epoch %d train loss %.6f", epoch, total / len(loader.dataset))


if __name__ == "__main__":
    main()
