"""Entry-point script: the parser is built at module level, everything else happens under `if __name__ == "__main__":`.

Imitates pytorch/examples word_language_model/main.py and many research repositories: module-level argparse,
train()/evaluate() helpers that read the model, optimizer, loaders and device as module globals bound in the
`__main__` block, an opt-in `--cuda` flag, a validation pass before training and a final save.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

parser = argparse.ArgumentParser(description="Entry-point style classifier")
parser.add_argument("--epochs", type=int, default=3, help="upper epoch limit")
parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="batch size")
parser.add_argument("--lr", type=float, default=0.05, help="initial learning rate")
parser.add_argument("--seed", type=int, default=1111, help="random seed")
parser.add_argument("--cuda", action="store_true", help="use CUDA")
parser.add_argument("--log-interval", type=int, default=6, metavar="N", help="report interval")
parser.add_argument("--save", type=str, default="model.pt", help="path to save the final model")


class TwoLayer(nn.Module):
    def __init__(self, ninp=12, nhid=32, nclass=3):
        super().__init__()
        self.hidden = nn.Linear(ninp, nhid)
        self.drop = nn.Dropout(0.1)
        self.decoder = nn.Linear(nhid, nclass)

    def forward(self, x):
        return self.decoder(self.drop(torch.tanh(self.hidden(x))))


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * x[:, 1], torch.tensor([-0.5, 0.5]))
    return TensorDataset(x, y)


def train(epoch):
    model.train()
    total_loss = 0.0
    for batch, (data, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        loss = criterion(model(data), targets)
        accelerator.backward(loss)
        optimizer.step()
        total_loss += loss.item()
        if batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            accelerator.print(f"| epoch {epoch:3d} | batch {batch:3d} | loss {cur_loss:.5f}")
            total_loss = 0.0


def evaluate(loader):
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, targets in loader:
            output = model(data)
            output, targets = accelerator.gather_for_metrics((output, targets))
            total_loss += len(targets) * criterion(output, targets).item()
            correct += (output.argmax(dim=1) == targets).sum().item()
    return total_loss / len(loader.dataset), correct / len(loader.dataset)


if __name__ == "__main__":
    args = parser.parse_args()
    accelerator = Accelerator(cpu=not args.cuda)
    # Set the random seed manually for reproducibility.
    torch.manual_seed(args.seed)
    if torch.cuda.is_available() and not args.cuda:
        accelerator.print("WARNING: You have a CUDA device, so you should probably run with --cuda")

    train_loader = DataLoader(make_split(640, seed=1), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(make_split(250, seed=2), batch_size=50)

    model = TwoLayer()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )

    val_loss, val_acc = evaluate(val_loader)
    accelerator.print(f"| before training | valid loss {val_loss:.5f} | valid acc {val_acc:.4f}")
    for epoch in range(1, args.epochs + 1):
        train(epoch)
        val_loss, val_acc = evaluate(val_loader)
        accelerator.print("-" * 89)
        accelerator.print(f"| end of epoch {epoch:3d} | valid loss {val_loss:.5f} | valid acc {val_acc:.4f}")
        accelerator.print("-" * 89)

    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), args.save)
    accelerator.end_training()
