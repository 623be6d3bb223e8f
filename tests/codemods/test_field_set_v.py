"""Shapes of the programs tried at the fifteenth stop (set V; docs/FIELD_TESTS.md names them)."""

from __future__ import annotations

from _convert import converted

from accelify.pipeline import convert_source
from accelify.program import ModuleText


def test_a_fresh_model_loaded_from_the_file_the_script_saved_waits_for_it() -> None:
    """V5 (a siamese network notebook's last cells): ``torch.save(model.state_dict(), p)``, then ``new_model = Net()``
    and ``new_model.load_state_dict(torch.load(p))``: the load into a model that is not prepared had no barrier, and
    the other process read the file before the main process wrote it (FileNotFoundError, 4 launches of 4)."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 4)), batch_size=4)
model = torch.nn.Linear(4, 4)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.save(model.state_dict(), "./model.pth")
new_model = torch.nn.Linear(4, 4)
new_model.load_state_dict(torch.load("./model.pth"))
print(new_model(torch.ones(1, 4)).sum().item())
"""
    new = converted(code)
    assert ('accelerator.save(accelerator.unwrap_model(model).state_dict(), "./model.pth")\n'
            'new_model = torch.nn.Linear(4, 4)\naccelerator.wait_for_everyone()\n'
            'new_model.load_state_dict(torch.load("./model.pth", map_location="cpu"))\n') in new, new


def test_a_visdom_client_is_made_and_written_on_the_main_process() -> None:
    """V9 (a ViT trained from scratch): ``vis = visdom.Visdom()``, ``vis.line(..., update="append")`` per epoch: every
    process appended its own points to the one window (unwarned). Kept to the main process as a ``SummaryWriter``."""
    code = """\
import torch
import visdom
from torch.utils.data import DataLoader, TensorDataset


def main():
    vis = visdom.Visdom(port=8097)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        vis.line(X=torch.ones((1, 1)) * epoch, Y=torch.Tensor([loss.item()]).unsqueeze(0), update="append", win="loss")


if __name__ == "__main__":
    main()
"""
    new = converted(code)
    assert "    vis = visdom.Visdom(port=8097) if accelerator.is_main_process else None\n" in new, new
    assert "        if accelerator.is_main_process:\n            vis.line(" in new, new


def test_a_writer_a_factory_returns_is_the_factorys_calls_and_a_figure_two_helpers_down_is_saved_once() -> None:
    """V8 (a detector's ``train.py``): ``writer = create_writer("exp")`` whose ``return SummaryWriter(log_dir=...)``
    made one log per process, unwarned (inline, it was reported: ACC024, handed to a function); ``plot_loss_curves``
    calls ``save_plot``, which runs ``plt.savefig``: every process wrote the figure (one helper down was followed,
    not two)."""
    utils = """\
import matplotlib.pyplot as plt


def save_plot(filename):
    plt.savefig(filename)


def plot_loss_curves(results, save_fig=False):
    plt.plot(results)
    if save_fig:
        save_plot("loss.png")
"""
    train = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter
from utils import plot_loss_curves


def create_writer(name):
    return SummaryWriter(log_dir=f"runs/{name}")


def fit(model, loader, opt, writer):
    losses = []
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        writer.add_scalar("loss", loss.item())
    return losses


loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
writer = create_writer("exp")
results = fit(model, loader, opt, writer)
plot_loss_curves(results, save_fig=True)
"""
    result = convert_source(train, path="train.py", modules=[ModuleText("utils", "utils.py", utils)])
    assert "if accelerator.is_main_process:\n    plot_loss_curves(results, save_fig=True)\n" in result.new, result.new
    assert [(w.code, w.line) for w in result.warnings] == [("ACC024", 26)], [w.format() for w in result.warnings]


def test_prints_in_the_methods_of_imported_classes_come_once() -> None:
    """V4 (word2vec): a data set whose ``__init__`` prints its shapes and a model method printing the nearest words
    after training printed on every process; ``total_loss / train_set.__len__()`` was reported (ACC028) where
    ``len(train_set)`` is reduced."""
    data = """\
import torch
from torch.utils.data import Dataset


class Pairs(Dataset):
    def __init__(self, n=16):
        self.x = torch.randn(n, 4)
        print(self.x.shape)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.x[i]
"""
    model = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)

    def show_top(self):
        print(self.fc.weight.flatten().topk(2))
"""
    train = """\
import torch
from torch.utils.data import DataLoader
from data import Pairs
from model import Net


def main():
    train_set = Pairs()
    loader = DataLoader(train_set, batch_size=4)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total_loss = 0.0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total_loss += loss.item()
    print(total_loss / train_set.__len__())
    model.show_top()


if __name__ == "__main__":
    main()
"""
    result = convert_source(train, path="train.py", modules=[ModuleText("data", "data.py", data),
                                                             ModuleText("model", "model.py", model)])
    companions = {c.path: c.new for c in result.companions}
    assert "        PartialState().print(self.x.shape)\n" in companions["data.py"], companions["data.py"]
    assert "        PartialState().print(self.fc.weight.flatten().topk(2))\n" in companions["model.py"], companions["model.py"]
    assert 'total_loss = accelerator.reduce(torch.tensor(total_loss, dtype=torch.float64, device=accelerator.device), "sum").item()' in result.new
    assert [w.code for w in result.warnings] == [], [w.format() for w in result.warnings]


def test_an_evaluation_the_script_also_hands_its_own_loader_walks_it_whole() -> None:
    """V6 (an LSTM forecaster's trainer): ``evaluate(val_loader)`` called in ``train()`` after ``prepare`` and by the
    script after training with its own loader was neither gathered nor reported: the printed validation loss was
    process 0's share, and the barrier the save rule put under ``if val_loss < best:`` was decided per process (a
    latent deadlock). At the fifteenth stop: ACC066. Now the validation loader is left out of ``prepare``: every
    process walks all of it at both calls, as the original did (the data here are drawn unseeded at the script's
    top level, so the barrier still goes before the test: each process's values may differ)."""
    trainer = """\
import torch


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def evaluate(self, val_loader):
        total = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                total += torch.nn.functional.mse_loss(self.model(x), y).item()
        return total / len(val_loader)

    def train(self, train_loader, val_loader, n_epochs):
        best = float("inf")
        for epoch in range(n_epochs):
            for x, y in train_loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
            val_loss = self.evaluate(val_loader)
            if val_loss < best:
                best = val_loss
                torch.save(self.model.state_dict(), "best.pth")
"""
    main = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import Trainer

train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(4, 1)
trainer = Trainer(model)
trainer.train(train_loader, val_loader, n_epochs=2)
print("final", trainer.evaluate(val_loader))
"""
    result = convert_source(main, path="main.py", modules=[ModuleText("trainer", "trainer.py", trainer)])
    new = result.companions[0].new
    warnings = [w for part in (result, *result.companions) for w in part.warnings]
    assert not warnings, [w.format() for w in warnings]
    assert "gather" not in new, new
    assert "self.model, self.optimizer, train_loader = self.accelerator.prepare(" in new, new
    assert ("            self.accelerator.wait_for_everyone()\n            if val_loss < best:\n") in new, new


def test_nothing_is_reported_in_code_after_a_return() -> None:
    """V6: a generator method returns its frame, and a ``df.to_csv(...)`` follows in the same block (the author's
    ``def`` line of another method went missing): ACC018 on a statement that never runs."""
    code = """\
import numpy as np
import pandas as pd
import torch


def make_series(n):
    x = np.random.randn(n, 4)
    return pd.DataFrame(x)
    df.to_csv("series.csv", index=False)


df = make_series(16)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for row in torch.tensor(df.values, dtype=torch.float32):
    opt.zero_grad()
    model(row).sum().backward()
    opt.step()
"""
    result = convert_source(code, path="train.py")
    assert "ACC018" not in [w.code for w in result.warnings], [w.format() for w in result.warnings]
    live = convert_source(code.replace("    return pd.DataFrame(x)\n    df.to_csv", "    df = pd.DataFrame(x)\n    df.to_csv")
                          .replace('index=False)\n', 'index=False)\n    return df\n', 1), path="train.py")
    assert "ACC018" in [w.code for w in live.warnings] or "is_main_process" in live.new, live.new
