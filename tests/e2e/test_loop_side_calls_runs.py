"""End to end on 2 processes: the shapes of field set J about the loop's other calls (docs/FIELD_TESTS.md, J1-J3).

Three programs, converted by the tool and run together by one driver (one launch):

- ``triplet``: siamese-triplet's evaluation: the forward in a generator (``tuple(emb(d) for d in data)``: the
  conversion took it out of the generator, NameError ``d``), a per-batch mean loss over that tuple (split member by
  member), and a target the loop sets to None for unlabelled data (gathered in one tuple with the outputs, the None
  sent it through ``gather_object``: a crash). 36 samples in batches of 8: the last round is uneven. The learning
  rate is 0, so the printed values must equal the original's on one process.
- ``vae``: a model's own sampling method (``model.inference(z)``) in the training loop, for a print only: refused
  (ACC025) before; converted and run now.
- ``gif``: ``imageio.mimsave("progress.gif", frames)`` after training: written by every process to one path before.
  A stand-in ``imageio`` beside the scripts appends the writing process's rank to the file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accelify.pipeline import convert_source

pytestmark = pytest.mark.multiprocess

ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]

PROGRAMS = {
    "triplet": """\
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Triplets(Dataset):
    def __init__(self, n, labelled):
        g = torch.Generator().manual_seed(n)
        self.x = torch.randn(n, 3, 4, generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.labelled = labelled

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return tuple(self.x[i]), (self.y[i] if self.labelled else [])


def triplet_loss(a, p, n):
    return torch.relu((a - p).pow(2).sum(1) - (a - n).pow(2).sum(1) + 1.0).mean()


def evaluate(name, loader):
    val_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            target = target if len(target) > 0 else None
            outputs = tuple(emb(d) for d in data)
            val_loss += triplet_loss(*outputs).item()
    print(f"{name} loss {val_loss / len(loader):.6f}")


def accuracy(name, loader):
    correct = 0
    with torch.no_grad():
        for data, target in loader:
            target = target if len(target) > 0 else None
            anchors = emb(data[0])
            if target is not None:
                correct += ((anchors.sum(1) > 0).long() == target).sum().item()
    print(f"{name} accuracy {correct / len(loader.dataset):.6f}")


torch.manual_seed(0)
emb = nn.Linear(4, 2)
optimizer = torch.optim.SGD(emb.parameters(), lr=0.0)
train = DataLoader(Triplets(32, False), batch_size=8, shuffle=True)
unlabelled = DataLoader(Triplets(36, False), batch_size=8)
labelled = DataLoader(Triplets(36, True), batch_size=8)
for data, target in train:
    optimizer.zero_grad()
    triplet_loss(*(emb(d) for d in data)).backward()
    optimizer.step()
evaluate("unlabelled", unlabelled)
evaluate("labelled", labelled)
accuracy("unlabelled", unlabelled)
accuracy("labelled", labelled)
""",
    "vae": """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 2)
        self.dec = nn.Linear(2, 8)

    def forward(self, x):
        return self.dec(self.enc(x))

    def inference(self, z):
        return torch.sigmoid(self.dec(z))


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.rand(32, 8)), batch_size=4, shuffle=True)
model = AE()
opt = torch.optim.SGD(model.parameters(), lr=0.0)
for i, (x,) in enumerate(loader):
    loss = ((model(x) - x) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == 0:
        samples = model.inference(torch.ones(3, 2))
        print(f"vae {samples.mean().item():.6f}")
""",
    "gif": """\
import imageio
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.rand(16, 4)), batch_size=4, shuffle=True)
G = torch.nn.Linear(4, 4)
opt = torch.optim.Adam(G.parameters(), lr=1e-2)
frames = []
for epoch in range(2):
    for (x,) in loader:
        loss = ((G(x) - x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        frames.append((G(torch.ones(4, 4)).sigmoid().numpy() * 255).astype(np.uint8))
imageio.mimsave("progress.gif", frames)
""",
}

IMAGEIO = """\
import os


def mimsave(path, frames):
    with open(path, "a") as out:
        out.write(f"rank{os.environ.get('RANK', '0')} {len(frames)}\\n")
"""

DRIVER = """\
import runpy
import sys

for path in sys.argv[1:]:
    runpy.run_path(path, run_name="__main__")
"""


def test_loop_side_calls_run_on_2_processes(tmp_path: Path, clean_env) -> None:  # type: ignore[no-untyped-def]
    for folder in ("original", "converted"):
        (tmp_path / folder / "imageio").mkdir(parents=True)
        (tmp_path / folder / "imageio" / "__init__.py").write_text(IMAGEIO, encoding="utf-8")
        (tmp_path / folder / "driver.py").write_text(DRIVER, encoding="utf-8")
    for name, code in PROGRAMS.items():
        (tmp_path / "original" / f"{name}.py").write_text(code, encoding="utf-8")
        result = convert_source(code)
        assert result.status == "converted" and not result.warnings, (name, [w.format() for w in result.warnings])
        (tmp_path / "converted" / f"{name}.py").write_text(result.new, encoding="utf-8")
    scripts = [f"{name}.py" for name in PROGRAMS]
    original = subprocess.run([sys.executable, "driver.py", *scripts], cwd=tmp_path / "original", capture_output=True,
                              text=True, timeout=120, env=clean_env(None))
    assert original.returncode == 0, original.stderr
    expected = original.stdout.splitlines()
    assert len(expected) == 4 + 1, original.stdout
    assert (tmp_path / "original" / "progress.gif").read_text(encoding="utf-8") == "rank0 2\n"
    run = subprocess.run([*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", "driver.py", *scripts],
                         cwd=tmp_path / "converted", capture_output=True, text=True, timeout=300, env=clean_env(None))
    assert run.returncode == 0, run.stderr[-3000:]
    printed = [line for line in run.stdout.splitlines() if line.split(" ")[0] in ("unlabelled", "labelled", "vae")]
    assert printed == expected, run.stdout
    assert (tmp_path / "converted" / "progress.gif").read_text(encoding="utf-8") == "rank0 2\n"  # the main process alone
