"""Set O's shapes (eleventh stop; their folders are named in docs/FIELD_TESTS.md), each a class a new author's program showed."""

from __future__ import annotations

from _convert import codes, converted

SCALAR_LOSS = """# A model whose forward returns its own (mean) loss, as a diffusion wrapper does: loss = diffusion(x, y)
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Diffusion(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x, y):
        noise = torch.randn_like(x)
        return ((self.net(x + noise) - noise) ** 2).mean()  # a 0-dim loss


def main():
    torch.manual_seed(0)
    model = Diffusion()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(64, 4), torch.zeros(64))
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    test_loader = DataLoader(data, batch_size=8)
    for epoch in range(2):
        for x, y in train_loader:
            loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        test_loss = 0
        with torch.no_grad():
            for x, y in test_loader:
                loss = model(x, y)
                test_loss += loss.item()
        test_loss /= len(test_loader)
        print(f"epoch {epoch} test loss {test_loss:.4f}")


if __name__ == "__main__":
    main()
"""


def test_an_evaluation_of_a_model_that_returns_its_own_loss_reduces_the_sum() -> None:
    """O4 (a DDPM wrapper): ``loss = model(x, y)`` is one number per batch, read as ``loss.item()``. It was gathered
    (N numbers, no batch to split) and split per original batch: ``.item()`` of two values crashed at the first
    evaluation. The running sum is reduced after the loop instead."""
    new = converted(SCALAR_LOSS)
    assert "gather_for_metrics" not in new
    assert ("            test_loss = accelerator.reduce(torch.tensor(test_loss, dtype=torch.float64, "
            "device=accelerator.device), \"mean\").item()\n") in new
    assert codes(SCALAR_LOSS) == []


OPTIMIZER_CLASS = """import numpy as np
import torch
import torch.nn as nn

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}
optimizer_class = OPTIMIZERS["sgd"]
net = nn.Linear(2, 1)
optimizer = optimizer_class(net.parameters(), lr=0.1)
for it in range(20):
    x = torch.Tensor(np.random.rand(32, 2))
    loss = ((net(x) - 1) ** 2).mean()
    net.zero_grad()
    loss.backward()
    optimizer.step()
print(loss.item())
"""


def test_an_optimizer_class_chosen_from_a_dict_and_zeroed_through_the_model_is_an_optimizer() -> None:
    """O14 (a 2-D GAN demo): ``optimizer = optimizer_class(net.parameters(), lr=...)``, the class from a dict of
    ``torch.optim`` classes, stepped; the gradients zeroed with ``net.zero_grad()``. Refused with ACC012 "no optimizer
    was found" (false); with ``optimizer.zero_grad()`` it was found."""
    assert "optimizer_class(" in OPTIMIZER_CLASS
    new = converted(OPTIMIZER_CLASS)
    assert "net, optimizer = accelerator.prepare(net, optimizer)\n" in new
    assert codes(OPTIMIZER_CLASS) == []


DEVICE_IN_A_DICT = """import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

params = {"lr": 0.1}


def init():
    cuda = torch.cuda.is_available()
    params.update({"device": torch.device("cuda:0" if cuda else "cpu")})


def train(params):
    model = nn.Linear(4, 1).to(params["device"])
    opt = torch.optim.SGD(model.parameters(), lr=params["lr"])
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    for epoch in range(2):
        for x, y in loader:
            x = x.to(params["device"])
            target = torch.full((x.size(0), 1), 1.0, device=params["device"])
            loss = ((model(x) - y.to(params["device"]) - target) ** 2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        print(epoch, loss.item())


if __name__ == "__main__":
    init()
    train(params)
"""


def test_a_device_kept_in_a_dict_is_the_processs_own() -> None:
    """O2 (a DCGAN trainer): ``params.update({"device": torch.device("cuda:0" ...)})`` then ``.to(params["device"])``:
    left with 0 warnings, every process would send its batches to GPU 0; then each such placement was reported
    (ACC002). Now the entry, made before the accelerator exists, is the runtime's process state's device (the
    twelfth stop's triage: tests/codemods/test_field_triage.py has the other forms)."""
    assert '    params.update({"device": PartialState().device})\n' in converted(DEVICE_IN_A_DICT)
    assert codes(DEVICE_IN_A_DICT) == []
