"""Right: the predictions and targets are gathered before counting; the main process logs the accuracy."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from accelify.runtime import Accelerator


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
    writer = SummaryWriter("runs/classifier") if accelerator.is_main_process else None
    for epoch in range(2):
        model.train()
        for inputs, targets in train:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for inputs, targets in test:
                predictions = model(inputs).argmax(dim=1)
                predictions, targets = accelerator.gather_for_metrics((predictions, targets))
                correct += (predictions == targets).sum().item()
                total += targets.size(0)
        if accelerator.is_main_process:
            writer.add_scalar("test/accuracy", correct / total, epoch)
    if writer is not None:
        writer.close()
    accelerator.end_training()


if __name__ == "__main__":
    main()
