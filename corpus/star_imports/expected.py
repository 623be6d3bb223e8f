"""A script whose loaders and model come through star imports of its own modules.

`from utils import *` gives `get_data` and `make_model` (utils lists them in `__all__`); `from data import *` gives
`valid_iter`, a DataLoader that data.py builds when it is imported. The objects are made at module level and handed
to the helpers, as in small translation repositories (train(model, iterator, optimizer)).
"""
import argparse

from utils import *
from data import *
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


def train(model, iterator, optimizer):
    for x, y in iterator:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    return loss.item()


def evaluate(model, iterator):
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in iterator:
            output = model(x)
            output, y = accelerator.gather_for_metrics((output, y))
            total += torch.nn.functional.mse_loss(output, y, reduction="sum").item()
            count += len(y)
    return total / count


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=8)
args = parser.parse_args()

torch.manual_seed(0)
loader = get_data(args)
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer, valid_iter, loader = accelerator.prepare(
    model, optimizer, valid_iter, loader
)
accelerator.print(f"valid before training {evaluate(model, valid_iter):.6f}")
for epoch in range(args.epochs):
    loss = train(model, loader, optimizer)
    accelerator.print(f"epoch {epoch} loss {loss:.6f}")
accelerator.print(f"valid {evaluate(model, valid_iter):.6f}")
accelerator.end_training()
