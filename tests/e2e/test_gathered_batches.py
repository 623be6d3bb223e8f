"""End to end, on 1, 2 and 3 processes: the shapes of field set I that exited 0 with values close to the original's,
or trained alike on every process (docs/FIELD_TESTS.md, W7, W8, W11 and the Udacity test loop).

Four programs, converted by the tool and run together by one driver (one launch per number of processes):

- ``udacity``: a tensor sum of mean losses and an accuracy that is a batch's mean over a gathered test loop, divided
  by ``len(testloader)``; ``early``: ``valid_losses.append(loss.item())`` then ``np.average``; ``quick``: PyTorch's
  quickstart ``test_loss /= num_batches``. 36 test samples in batches of 8: the last round is uneven on 2 and 3
  processes. ``accelify verify``'s exact mode cannot see these (it feeds the gathered loop the original's batches):
  the learning rate is 0, so every run evaluates the same weights, and the printed values must equal the original's
  on one process.
- ``rmse`` (field set Q, Q1's trainer class): a list of ``torch.sqrt(F.nll_loss(out, y))`` per test batch, averaged
  after the loop: its values are not known as tensors from a ``backward()``; run per original batch like ``early``.
- ``triplet`` (set U, U13's test loop): a triplet loss of three forward passes in one statement
  (``triplet_margin_loss(model(x), model(x.flip(0)), model(-x))``) and ``criterion(model(x), y).item()``, each summed
  and divided by ``len(test_loader)``: every forward is taken out and gathered, the sums run per original batch (one
  forward taken out and the sum reduced as a tensor was a crash: ``reduce`` of a float).
- ``roc`` (field set U, U11's trainer class): a sum of ``np.sum(pred & mask) / n`` per sample over a gathered test
  loader, divided by ``len(loader)``: the sum is the whole set's, the divisor the original's number of batches; the
  accelerator is ended after the evaluation method, not in the training one it follows.
- ``sched``: a per-epoch ``MultiStepLR`` bound in the branches of an ``if``/``else``: the learning rate printed per
  epoch is the original's (prepared, it reached its milestones N times too early).
- ``gan``: noise for the generator drawn at every step after a shared ``test_noise``: every process draws the same
  ``test_noise`` and its own step noise (seeded alike and left so, the N fake batches were copies).
- ``kwargs`` (three files, SimCLR's shape, field set I, I10): a trainer class that takes its model, optimizer and a
  per-epoch ``CosineAnnealingLR(opt, T_max=len(loader))`` through ``**kwargs`` (``self.scheduler =
  kwargs["scheduler"]``) and saves ``{"state_dict": self.model.state_dict()}`` through a helper of another module:
  the learning rate printed per epoch is the original's (the scheduler stays out of prepare and is built before it,
  from the whole loader's length) and the checkpoint's keys have no ``module.`` prefix.
- ``mining`` (two files, siamese-triplet's ``test_epoch``, field set J, J3): a loss of the program's that chooses pairs
  within the batch, handed to the helper as ``loss_fn``: computed on each process's own batch (on the gathered
  batches it mined across processes), the sum reduced with "mean" for ``fit``'s ``val_loss /= len(val_loader)``; 48
  test samples in batches of 8 fill whole rounds on 2 and 3 processes, so the printed loss is the original's.
- ``imported`` (two files, field set L, L2): a data module that prints while the script imports it, before the
  accelerator exists (``PartialState(cpu=True).print`` made ahead of the script's ``Accelerator(cpu=True)``): each
  line once, as the original's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accelify.pipeline import convert_source
from accelify.program import ModuleText

pytestmark = pytest.mark.multiprocess

ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]

DATA = """\
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train_loader = DataLoader(TensorDataset(torch.randn(32, 6), torch.randint(0, 4, (32,))), batch_size=8, shuffle=True)
test_loader = DataLoader(TensorDataset(torch.randn(36, 6), torch.randint(0, 4, (36,))), batch_size=8)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4), nn.LogSoftmax(dim=1))
criterion = nn.NLLLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
for x, y in train_loader:
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    optimizer.step()
"""

PROGRAMS = {
    "udacity": DATA + """\
test_loss = 0
accuracy = 0
with torch.no_grad():
    model.eval()
    for images, labels in test_loader:
        log_ps = model(images)
        test_loss += criterion(log_ps, labels)
        ps = torch.exp(log_ps)
        top_p, top_class = ps.topk(1, dim=1)
        equals = top_class == labels.view(*top_class.shape)
        accuracy += torch.mean(equals.type(torch.FloatTensor))
print("udacity {:.6f} {:.6f}".format(test_loss / len(test_loader), accuracy / len(test_loader)))
""",
    "early": DATA + """\
valid_losses = []
model.eval()
for data, target in test_loader:
    output = model(data)
    loss = criterion(output, target)
    valid_losses.append(loss.item())
print(f"early {np.average(valid_losses):.6f} {len(valid_losses)}")
""",
    "rmse": DATA + """\
class Tester:
    def __init__(self, model, test_loader):
        self.model = model
        self.test_loader = test_loader
        self.test_loss_list = []

    def test_epoch(self):
        self.model.eval()
        cur_losses = []
        for x, y in self.test_loader:
            out = self.model(x)
            mse = torch.nn.functional.nll_loss(out, y)
            rmse = torch.sqrt(mse)
            cur_losses.append(rmse)
        self.test_loss_list.append(float(sum(cur_losses) / len(cur_losses)))


tester = Tester(model, test_loader)
tester.test_epoch()
print(f"rmse {tester.test_loss_list[-1]:.6f}")
""",
    "triplet": DATA + """\
total = 0.0
nll = 0.0
with torch.no_grad():
    for x, y in test_loader:
        total += torch.nn.functional.triplet_margin_loss(model(x), model(x * 0.5), model(-x), margin=2.0).item()
        nll += criterion(model(x), y).item()
print(f"triplet {total / len(test_loader):.6f} {nll / len(test_loader):.6f}")
""",
    "roc": """\
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Model:
    def __init__(self):
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(16, 16), nn.Sigmoid())
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=0.0)
        self.loss = nn.BCELoss()
        x = torch.rand(48, 16)
        y = (x > 0.5).float()
        self.train_dataloader = DataLoader(TensorDataset(x[:36], y[:36]), batch_size=8, shuffle=True)
        self.test_dataloader = DataLoader(TensorDataset(x[36:], y[36:]), batch_size=2)  # (one per batch: left unprepared)

    def train(self):
        for epoch in range(2):
            for img, mask in self.train_dataloader:
                self.optimizer.zero_grad()
                loss = self.loss(self.net(img), mask)
                loss.backward()
                self.optimizer.step()

    def compute_roc(self):
        tpr = []
        length_images = 16
        with torch.no_grad():
            for threshold in np.arange(0.0, 1.1, 0.5):
                TP = 0
                for _, (img, mask) in enumerate(self.test_dataloader):
                    pred = self.net(img).numpy().ravel() > threshold
                    mask = mask.numpy().ravel() > 0.5
                    TP += np.sum(pred & mask) / length_images
                tpr.append(TP / len(self.test_dataloader))
        print("roc", [round(float(t), 6) for t in tpr])


if __name__ == "__main__":
    model = Model()
    model.train()
    model.compute_roc()
""",
    "quick": DATA + """\
def test(dataloader, model, loss_fn):
    size = len(dataloader.dataset)
    num_batches = len(dataloader)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    test_loss /= num_batches
    correct /= size
    print(f"quick {correct:.6f} {test_loss:.6f}")


test(test_loader, model, criterion)
""",
    "sched": """\
import sys
import torch
from torch.optim.lr_scheduler import MultiStepLR
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
if len(sys.argv) > 99:
    scheduler = MultiStepLR(opt, milestones=[3], gamma=0.1)
else:
    scheduler = MultiStepLR(opt, milestones=[2], gamma=0.2)
for epoch in range(4):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    scheduler.step()
    print("sched", epoch, round(opt.param_groups[0]["lr"], 6))
""",
    "gan": """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.ones(32, 4)), batch_size=4, shuffle=True)
D = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
G = nn.Linear(3, 4)
d_opt = torch.optim.Adam(D.parameters(), lr=1e-3)
g_opt = torch.optim.Adam(G.parameters(), lr=1e-3)
bce = nn.BCELoss()
test_noise = torch.randn(4, 3)
for (real,) in loader:
    z = torch.randn(real.size(0), 3)
    fake = G(z)
    d_opt.zero_grad()
    d_loss = bce(D(real), torch.ones(real.size(0), 1)) + bce(D(fake.detach()), torch.zeros(real.size(0), 1))
    d_loss.backward()
    d_opt.step()
    g_opt.zero_grad()
    bce(D(fake), torch.ones(real.size(0), 1)).backward()
    g_opt.step()
""",
    "kwargs": """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from kw_trainer import KwTrainer
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(loader), eta_min=0)
KwTrainer(model=model, optimizer=opt, scheduler=sched, epochs=4).train(loader)
""",
    "mining": """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from mining_trainer import fit


class OnlinePairLoss(nn.Module):
    def forward(self, embeddings, target):
        pairs = torch.triu(target[:, None] == target[None, :], diagonal=1).nonzero()
        return (embeddings[pairs[:, 0]] - embeddings[pairs[:, 1]]).pow(2).sum(1).mean(), len(pairs)


torch.manual_seed(0)
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8, shuffle=True)
test_loader = DataLoader(TensorDataset(torch.randn(48, 4), torch.randint(0, 3, (48,))), batch_size=8)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
fit(train_loader, test_loader, model, OnlinePairLoss(), optimizer, 2)
""",
    "imported": """\
import torch
from torch import nn
from imported_data import loader

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
print("imported trained")
""",
}

# the local modules of a program of several files
MODULES = {
    "mining": {
        "mining_trainer.py": """\
import torch
def fit(train_loader, val_loader, model, loss_fn, optimizer, n_epochs, metrics=[]):
    for epoch in range(n_epochs):
        for data, target in train_loader:
            optimizer.zero_grad()
            loss_outputs = loss_fn(model(data), target)
            loss_outputs[0].backward()
            optimizer.step()
        val_loss, metrics = test_epoch(val_loader, model, loss_fn, metrics)
        val_loss /= len(val_loader)
        print("mining", epoch, f"{val_loss:.6f}")
def test_epoch(val_loader, model, loss_fn, metrics):
    with torch.no_grad():
        model.eval()
        val_loss = 0
        for batch_idx, (data, target) in enumerate(val_loader):
            outputs = model(data)
            if type(outputs) not in (tuple, list):
                outputs = (outputs,)
            loss_inputs = outputs + (target,)
            loss_outputs = loss_fn(*loss_inputs)
            loss = loss_outputs[0] if type(loss_outputs) in (tuple, list) else loss_outputs
            val_loss += loss.item()
            for metric in metrics:
                metric(outputs, target, loss_outputs)
    return val_loss, metrics
""",
    },
    "kwargs": {
        "kw_trainer.py": """\
import torch
from kw_utils import save_checkpoint
class KwTrainer:
    def __init__(self, *args, **kwargs):
        self.model = kwargs["model"]
        self.optimizer = kwargs.get("optimizer")
        self.scheduler = kwargs["scheduler"]
        self.epochs = kwargs.get("epochs", 1)
    def train(self, loader):
        for epoch in range(self.epochs):
            for x, y in loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
            self.scheduler.step()
            print("kwargs", epoch, round(self.optimizer.param_groups[0]["lr"], 6))
        save_checkpoint({"epoch": self.epochs, "state_dict": self.model.state_dict()}, "kwargs.pt")
""",
        "kw_utils.py": """\
import torch
def save_checkpoint(state, filename):
    torch.save(state, filename)
""",
    },
    "imported": {
        "imported_data.py": """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def file_names():
    print("imported preparing file names")
    return [f"clip{i}.wav" for i in range(16)]


files = file_names()
loader = DataLoader(TensorDataset(torch.randn(len(files), 4), torch.randint(0, 2, (len(files),))), batch_size=4)
print("imported samples", len(files))
""",
    },
}
# what the conversion rightly reports: the helper's torch.save has no accelerator (every process writes the file)
WARNINGS = {"kwargs": ["ACC009"]}

# runs each program in turn in this process (the converted ones share the one process group), then writes, per
# process, the GAN's shared test noise and the last step's noise to a file of its own (lines the processes print
# at once can interleave on the launcher's shared stdout)
DRIVER = """\
import os
import runpy
import sys

import torch

rank = os.environ.get("RANK", "0")
for path in sys.argv[1:]:
    found = runpy.run_path(path, run_name="__main__")
    if path.endswith("kwargs.py") and rank == "0":  # (every process has saved it: end_training waited for them)
        print("kwargs keys", sorted(torch.load("kwargs.pt")["state_dict"]))
    if path.endswith("gan.py"):
        with open(f"gan_rank{rank}.txt", "w") as out:
            out.write(f"rank{rank} gan {found['test_noise'].sum().item():.6f} {found['z'].sum().item():.6f}\\n")
"""


def _gan_lines(folder: Path) -> list[str]:
    lines = [p.read_text(encoding="utf-8").strip() for p in sorted(folder.glob("gan_rank*.txt"))]
    for p in folder.glob("gan_rank*.txt"):
        p.unlink()
    return lines


def test_gathered_values_schedulers_draws_and_trainer_kwargs_on_2_and_3_processes(tmp_path: Path, clean_env) -> None:  # type: ignore[no-untyped-def]
    for folder in ("original", "converted"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "driver.py").write_text(DRIVER, encoding="utf-8")
    for name, code in PROGRAMS.items():
        (tmp_path / "original" / f"{name}.py").write_text(code, encoding="utf-8")
        modules = [ModuleText(path[:-3], path, text) for path, text in MODULES.get(name, {}).items()]
        result = convert_source(code, path=f"{name}.py", modules=modules)
        warnings = [w for part in (result, *result.companions) for w in part.warnings]
        assert result.status == "converted", (name, result.reason)
        assert [w.code for w in warnings] == WARNINGS.get(name, []), (name, [w.format() for w in warnings])
        (tmp_path / "converted" / f"{name}.py").write_text(result.new, encoding="utf-8")
        converted = {c.path: c.new for c in result.companions}
        for module in modules:
            (tmp_path / "original" / module.path).write_text(module.text, encoding="utf-8")
            (tmp_path / "converted" / module.path).write_text(converted.get(module.path, module.text), encoding="utf-8")
    scripts = [f"{name}.py" for name in PROGRAMS]
    original = subprocess.run([sys.executable, "driver.py", *scripts], cwd=tmp_path / "original", capture_output=True,
                              text=True, timeout=120, env=clean_env(None))
    assert original.returncode == 0, original.stderr
    expected = original.stdout.splitlines()
    assert len(_gan_lines(tmp_path / "original")) == 1
    assert len(expected) == 3 + 4 + 4 + 1 + 2 + 3 + 1 + 1 + 1, original.stdout
    assert "kwargs 1 0.05" in expected and "kwargs keys ['0.bias', '0.weight']" in expected, original.stdout
    for n in (2, 3):
        run = subprocess.run([*ACCELIFY, "launch", "--cpu", "-n", str(n), "-q", "driver.py", *scripts],
                             cwd=tmp_path / "converted", capture_output=True, text=True, timeout=300, env=clean_env(None))
        assert run.returncode == 0, run.stderr[-3000:]
        printed = [line for line in run.stdout.splitlines() if line.split(" ")[0] in PROGRAMS]
        assert printed == expected, f"on {n} processes:\n" + run.stdout
        gan = _gan_lines(tmp_path / "converted")
        assert len(gan) == n, run.stdout
        assert len({line.split()[2] for line in gan}) == 1, gan  # the shared test noise, alike
        assert len({line.split()[3] for line in gan}) == n, gan  # each process its own step noise
