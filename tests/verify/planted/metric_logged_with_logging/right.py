"""Right: the epoch's total is reduced over the processes before dividing and logging."""
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

logger = logging.getLogger(__name__)


def main():
    logging.basicConfig(filename="train.log", level=logging.INFO, format="%(asctime)s %(message)s")
    accelerator = Accelerator()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 6, generator=g)
    y = x @ torch.randn(6, 1, generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(3):
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            total += loss.item() * inputs.size(0)
        total = accelerator.reduce(torch.tensor(total), "sum").item()
        if accelerator.is_main_process:
            logger.info("epoch %d train loss %.6f", epoch, total / len(loader.dataset))
    accelerator.end_training()


if __name__ == "__main__":
    main()
