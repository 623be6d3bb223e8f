"""Running sums the loader-walking analysis does not see: over batches a loop draws itself with ``next`` from a prepared
loader (set P's P4, a conditional GAN), and kept by a model on itself (set P's P10, a VAE). Both are one process's
share on N processes, and were read and logged with no warning; they are reported (ACC028). Also the shapes found
with them: a model built in the call of a function that trains on drawn batches, and ``len`` of an iterator."""

from __future__ import annotations

from _convert import codes, converted

DRAWN_IN_WHILE = """import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, dataset, epochs, iters):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        totals = [0.0, 0.0]
        loader = iter(DataLoader(dataset, batch_size=8, shuffle=True, drop_last=True))
        i = 0
        while i * iters < len(loader) - iters:
            i += 1
            step = 0
            while step < iters:
                step += 1
                x, y = next(loader)
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                totals[0] += loss.item()
                loss.backward()
                optimizer.step()
        print(epoch, totals[0] / (i * iters))


if __name__ == "__main__":
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    net = torch.nn.Linear(4, 1)
    train(net, data, 2, 2)
"""

DRAWN_IN_RANGE = """import torch
from torch.utils.data import DataLoader, TensorDataset


def main():

    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(loader)
    total = 0.0
    for step in range(4):
        x, y = next(batches)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    print("mean loss", total / 4)


main()
"""

MODEL_KEEPS_SUMS = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.sums = {"loss": 0.0}

    def forward(self, x, y):
        self.loss = nn.functional.mse_loss(self.fc(x), y)
        self.accumulate()
        return self.loss

    def accumulate(self):
        self.sums["loss"] += self.loss.item()

    def epoch_losses(self, size):
        out = {k: v / size for k, v in self.sums.items()}
        self.sums = {"loss": 0.0}
        return out


def train(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
    return model.epoch_losses(len(loader.dataset))


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        print(epoch, train(model, loader, optimizer))


if __name__ == "__main__":
    main()
"""

MODEL_BUILT_IN_THE_CALL = DRAWN_IN_WHILE.replace("    net = torch.nn.Linear(4, 1)\n    train(net, data, 2, 2)\n",
                                                "    train(torch.nn.Linear(4, 1), data, 2, 2)\n")


def test_sums_in_list_elements_over_batches_a_while_loop_draws_are_reported() -> None:
    """P4: ``totals[0] += loss.item()`` in a ``while`` loop that draws ``next(loader)`` of ``iter(DataLoader(...))``,
    the epoch's mean logged after the loop: each process sums its own shard's batches."""
    assert "ACC028:19" in codes(DRAWN_IN_WHILE)


def test_the_same_sum_read_only_inside_the_loop_is_left() -> None:
    """Near miss: a running value printed inside the loop (one process's progress, by convention) is not reported."""
    source = DRAWN_IN_WHILE.replace("        print(epoch, totals[0] / (i * iters))\n", "                print(totals[0])\n")
    assert source != DRAWN_IN_WHILE
    assert not any(c.startswith("ACC028") for c in codes(source))


def test_a_counter_of_the_draws_is_not_a_sum() -> None:
    """Near miss: ``step += 1`` counts draws, the same on every process."""
    source = DRAWN_IN_WHILE.replace("totals[0] += loss.item()", "totals[0] += 1")
    assert source != DRAWN_IN_WHILE
    assert not any(c.startswith("ACC028") for c in codes(source))


def test_a_sum_over_batches_drawn_in_a_loop_over_indices_is_reported() -> None:
    """``for step in range(4): x, y = next(batches)``: the loop walks indices, the batches are the shard's."""
    assert "ACC028:19" in codes(DRAWN_IN_RANGE)


def test_the_while_on_the_length_of_the_loaders_iterator_converts() -> None:
    """``while i * iters < len(loader) - iters`` with ``loader = iter(DataLoader(...))``: the length of a prepared
    loader is the same on every process (even batches); it was a false ACC017 (a local ``while``)."""
    new = converted(DRAWN_IN_WHILE)
    assert not any(c.startswith("ACC017") for c in codes(DRAWN_IN_WHILE))
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in new
    assert "iter(accelerator.prepare(DataLoader(" in new


def test_a_model_built_in_the_call_of_a_function_that_trains_on_drawn_batches_is_refused() -> None:
    """``train(torch.nn.Linear(4, 1), data, 2, 2)``, ``train`` drawing from a loader it prepares where it builds it:
    the model was left out of ``prepare`` (only the optimizer was), so each process trained its own copy, silently.
    Refused as the same layout with a ``for`` loop over the loader is (ACC014)."""
    assert "ACC014:27" in codes(MODEL_BUILT_IN_THE_CALL)


def test_sums_a_model_keeps_on_itself_and_hands_back_after_the_loop_are_reported() -> None:
    """P10: the forward calls ``self.accumulate()``, which adds to ``self.sums``; ``model.epoch_losses(...)`` after the
    loop returns them: one process's share."""
    assert "ACC028:32" in codes(MODEL_KEEPS_SUMS)


def test_a_model_method_that_reads_no_summed_attribute_is_left() -> None:
    """Near miss: what is read after the loop is not what the forward sums."""
    source = MODEL_KEEPS_SUMS.replace("return model.epoch_losses(len(loader.dataset))", "return model.fc.weight.sum().item()")
    assert source != MODEL_KEEPS_SUMS
    assert not any(c.startswith("ACC028") for c in codes(source))
