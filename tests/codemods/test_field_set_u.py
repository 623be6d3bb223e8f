"""Shapes of the programs tried at the fourteenth stop (set Q's Q1 and set N's N14 again, and set U;
docs/FIELD_TESTS.md names them)."""

from __future__ import annotations

import json

from _convert import codes, converted

from accelify.pipeline import convert_notebook_text, convert_source
from accelify.program import ModuleText

# N14 (a U-Net segmentation script): a runs log opened around the epochs, a torchsummary table of the model before
# prepare, and the much-copied EarlyStopping whose messages go through ``trace_func=print``
SEGMENTATION = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchsummary import summary
from callbacks import EarlyStopping


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    model = model.to(device)
    summary(model.cuda(), (4,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stopper = EarlyStopping(patience=3)
    with open("runs.txt", "a") as f:
        f.write("start\\n")
        for epoch in range(2):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
            print(f"{epoch} {loss.item()}", file=f)
            stopper(loss.item(), model)


if __name__ == "__main__":
    main()
"""

CALLBACKS = """\
import torch


class EarlyStopping:
    def __init__(self, patience=5, path="checkpoint.pt", trace_func=print):
        self.patience = patience
        self.path = path
        self.best = None
        self.trace_func = trace_func

    def __call__(self, val_loss, model):
        if self.best is None or val_loss < self.best:
            self.trace_func(f"improved to {val_loss:.4f}, saving")
            self.best = val_loss
            torch.save(model.state_dict(), self.path)
"""


def _segmentation() -> tuple[str, str]:
    result = convert_source(SEGMENTATION, path="train.py", modules=[ModuleText("callbacks", "callbacks.py", CALLBACKS)])
    assert result.status == "converted", result.reason
    assert [w.code for part in (result, *result.companions) for w in part.warnings] == []
    return result.new, next(c.new for c in result.companions if c.path == "callbacks.py")


def test_a_log_a_with_block_opens_around_the_training_is_written_on_the_main_process() -> None:
    """N14: ``with open(runs_file, "a") as f:`` holding the epochs was reported (ACC024: kept to the main process
    whole, the block would train alone); the other processes now write to ``os.devnull``, the block runs everywhere."""
    new, _ = _segmentation()
    assert 'with open("runs.txt", "a") if accelerator.is_main_process else open(os.devnull, "a") as f:\n' in new
    assert "import os\n" in new


def test_a_torchsummary_table_before_prepare_comes_once_with_the_model_on_the_device() -> None:
    """N14: ``summary(model.cuda(), ...)`` before ``prepare`` printed its table on every process, and with the
    ``.cuda()`` dropped torchsummary would feed GPU inputs to a CPU model on a GPU machine."""
    new, _ = _segmentation()
    assert "    if accelerator.is_main_process:\n        summary(model.to(accelerator.device), (4,))\n" in new


def test_a_print_function_handed_in_by_default_prints_once() -> None:
    """N14's EarlyStopping keeps ``trace_func=print``: each process printed "improved ... saving"."""
    _, callbacks = _segmentation()
    assert "self.trace_func = self.accelerator.print if trace_func is print else trace_func\n" in callbacks


def test_a_handle_that_is_read_as_well_stays_reported() -> None:
    """The devnull stand-in only where the block writes through the handle and nothing else."""
    source = SEGMENTATION.replace('print(f"{epoch} {loss.item()}", file=f)', 'f.seek(0)')
    result = convert_source(source, path="train.py", modules=[ModuleText("callbacks", "callbacks.py", CALLBACKS)])
    assert [w.code for w in result.warnings] == ["ACC024"], [w.format() for w in result.warnings]
    assert "devnull" not in result.new


# Q1 (ScXfjiang/pmf): a trainer class whose test loop appends ``torch.sqrt(mse)`` per batch and averages the list
RMSE_TRAINER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, test_loader):
        self.model = model
        self.test_loader = test_loader
        self.test_loss_list = []

    def test_epoch(self):
        self.model.eval()
        cur_losses = []
        for user, rating in self.test_loader:
            estimate = self.model(user)
            mse = torch.nn.functional.mse_loss(estimate, rating)
            rmse = torch.sqrt(mse)
            cur_losses.append(rmse)
        self.test_loss_list.append(float(sum(cur_losses) / len(cur_losses)))


def main():
    loader = DataLoader(TensorDataset(torch.randn(36, 4), torch.randn(36, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    trainer = Trainer(model, loader)
    trainer.test_epoch()
    print(trainer.test_loss_list)


if __name__ == "__main__":
    main()
"""


def test_a_list_of_per_batch_rmses_over_a_gathered_loop_is_computed_per_original_batch() -> None:
    """Q1: ``torch.sqrt(mse)`` was not known as a tensor, so the list was kept and reported (ACC042); it is computed
    per original batch of the gathered pass (the e2e test ``rmse`` checks the value on 2 and 3 processes)."""
    assert codes(RMSE_TRAINER) == []
    new = converted(RMSE_TRAINER)
    assert "for rating, estimate in zip(" in new or "for estimate, rating in zip(" in new, new


# U8 (ShotaDeguchi/GCN_Cora): the script trains full-batch in ``main()`` and imports a helper module whose template
# ``train`` (called by nothing) calls ``train_step``, which walks a loader nothing builds
GCN_SCRIPT = """\
import torch
from train_utils import *


def main():
    features = torch.randn(20, 4)
    labels = torch.randn(20, 1)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(5):
        model.train()
        loss = torch.nn.functional.mse_loss(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    save_model(model, "gcn.pth")


if __name__ == "__main__":
    main()
"""

GCN_UTILS = """\
import torch


def train_step(model, dataloader, optimizer, loss_fn):
    for X, y in dataloader:
        loss = loss_fn(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def save_model(model, path):
    torch.save(model.state_dict(), path)


def train(model, train_dataloader, optimizer, loss_fn, epochs=5):
    for epoch in range(epochs):
        train_step(model, train_dataloader, optimizer, loss_fn)
"""


def test_a_helper_only_an_uncalled_helper_calls_never_runs() -> None:
    """U8: refused (ACC021, "the training loop walks `dataloader`, which could not be followed") for a loop in a
    function that only a function nothing calls calls; ``model.train()`` reads another ``train``."""
    result = convert_source(GCN_SCRIPT, path="train.py", modules=[ModuleText("train_utils", "train_utils.py", GCN_UTILS)])
    assert result.status == "converted", result.reason
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in result.new
    called = GCN_SCRIPT.replace('    save_model(model, "gcn.pth")\n', '    save_model(model, "gcn.pth")\n    train(model, None, optimizer, None)\n')
    again = convert_source(called, path="train.py", modules=[ModuleText("train_utils", "train_utils.py", GCN_UTILS)])
    assert again.status != "converted" or any(w.code == "ACC021" for part in (again, *again.companions) for w in part.warnings)


def test_a_notebook_that_ends_with_a_value_shows_it_after_the_conversion() -> None:
    """U7: ``accelerator.end_training()`` went after the last cell's ``min(losses)``, whose value Jupyter then no
    longer showed; it goes before such a value (a call made for what it does keeps it before)."""
    def notebook(*cells: str) -> str:
        return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                                      "source": cell.splitlines(True)} for cell in cells],
                           "metadata": {}, "nbformat": 4, "nbformat_minor": 5})

    train = ("losses = []\nfor epoch in range(3):\n    optimizer.zero_grad()\n"
             "    loss = torch.nn.functional.mse_loss(model(x), y)\n    loss.backward()\n    optimizer.step()\n"
             "    losses.append(loss.item())")
    setup = ("import torch\nx = torch.randn(16, 4)\ny = torch.randn(16, 1)\nmodel = torch.nn.Linear(4, 1)\n"
             "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)")
    for last, ends_with in (("# the lowest loss\nmin(losses)", "min(losses)"),
                            ('torch.save(model.state_dict(), "m.pt")', "accelerator.end_training()")):
        result = convert_notebook_text(notebook(setup, train, last), path="train.ipynb")
        assert result.status == "converted", result.reason
        cells = json.loads(result.new)["cells"]
        assert "".join(cells[-1]["source"]).splitlines()[-1] == ends_with, cells[-1]["source"]


def test_a_sum_over_the_rows_of_a_gathered_loop_is_divided_by_the_original_number_of_batches() -> None:
    """U11 (a U-Net's ``--roc``): ``TP += np.sum(pred & mask) / length_images`` per sample of a gathered test loader,
    then ``TP / len(self.test_dataloader)``: the sum was the whole set's, the divisor this process's count (rates 2x,
    unwarned). The e2e test ``roc`` (tests/e2e/test_gathered_batches.py) runs it on 2 and 3 processes."""
    import pathlib

    source = (pathlib.Path(__file__).resolve().parents[1] / "e2e" / "test_gathered_batches.py").read_text(encoding="utf-8")
    program = source.split('    "roc": """\\\n', 1)[1].split('""",\n', 1)[0]
    assert codes(program) == []
    new = converted(program)
    assert "tpr.append(TP / len(self.test_dataloader.batch_sampler.batch_sampler))" in new
    # the accelerator ends after the evaluation that follows the training, not at the end of ``train``
    assert new.rstrip().endswith("model.compute_roc()\n    model.accelerator.end_training()")


def test_the_generator_output_of_a_retained_discriminator_loss_is_detached_there() -> None:
    """U12 (a WGAN many copy): the critic's loss read the generator's output undetached and was backpropagated with
    ``retain_graph=True``; the generator step then went through the same forward a second time, which DDP does not
    average: the generators parted (the runtime's sentinel stopped it). The rule's own examples show the shape and
    its near miss; this is the DCGAN layout of the same author's, the discriminator's output reshaped first."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True)
disc = torch.nn.Sequential(torch.nn.Linear(8, 1), torch.nn.Sigmoid())
gen = torch.nn.Linear(4, 8)
opt_gen = torch.optim.Adam(gen.parameters(), lr=2e-4)
opt_disc = torch.optim.Adam(disc.parameters(), lr=2e-4)
criterion = torch.nn.BCELoss()
for (real,) in loader:
    fake = gen(torch.randn(real.shape[0], 4))
    disc_real = disc(real).reshape(-1)
    loss_disc_real = criterion(disc_real, torch.ones_like(disc_real))
    disc_fake = disc(fake).reshape(-1)
    loss_disc_fake = criterion(disc_fake, torch.zeros_like(disc_fake))
    loss_disc = (loss_disc_real + loss_disc_fake) / 2
    disc.zero_grad()
    loss_disc.backward(retain_graph=True)
    opt_disc.step()
    output = disc(fake).reshape(-1)
    loss_gen = criterion(output, torch.ones_like(output))
    gen.zero_grad()
    loss_gen.backward()
    opt_gen.step()
"""
    new = converted(code)
    assert "    disc_fake = disc(fake.detach()).reshape(-1)\n" in new, new
    assert "    output = disc(fake).reshape(-1)\n" in new


def test_labels_a_prepared_loader_puts_on_the_device_are_copied_to_the_host_for_numpy() -> None:
    """U9: ``trues.extend(yb.numpy().tolist())`` of labels the original never moved: a prepared loader puts them on
    the GPU, where ``.numpy()`` raises; it reads ``yb.cpu().numpy()``."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
device = "cuda" if torch.cuda.is_available() else "cpu"
train_loader = DataLoader(TensorDataset(torch.randn(32, 3), torch.randint(0, 2, (32,))), batch_size=8)
val_loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=8)
model = torch.nn.Linear(3, 2).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in train_loader:
    xb, yb = xb.to(device), yb.to(device)
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
preds, trues = [], []
with torch.no_grad():
    for xb, yb in val_loader:
        xb = xb.to(device)
        preds.extend(model(xb).argmax(dim=1).cpu().numpy().tolist())
        trues.extend(yb.numpy().tolist())
print(sum(p == t for p, t in zip(preds, trues)) / len(trues))
"""
    new = converted(code)
    assert "trues.extend(yb.cpu().numpy().tolist())" in new, new


def test_a_backward_a_replay_buffer_length_gates_is_reported() -> None:
    """U10 (a double DQN): ``if len(buffer) > THRESHOLD: train_step(...)``, each process's buffer filled by its own
    episodes; the processes start training at different episodes and wait for each other (a hang with a larger
    threshold). Reported where the backward is, naming the test at the call (ACC064)."""
    code = """\
import random
import torch


def train_step(q_net, optimizer, buffer):
    batch = torch.stack(random.sample(buffer, 8))
    loss = q_net(batch).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main():
    q_net = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=1e-3)
    buffer = []
    for episode in range(30):
        done = False
        while not done:
            buffer.append(torch.randn(4))
            done = random.random() < 0.2
        if len(buffer) > 32:
            train_step(q_net, optimizer, buffer)


if __name__ == "__main__":
    main()
"""
    result = convert_source(code)
    found = [w for w in result.warnings if w.code == "ACC064"]
    assert [w.line for w in found] == [9] and "called under `if len(buffer) > 32`" in found[0].message, result.warnings


def test_the_entry_script_of_a_trainer_in_another_module_writes_and_prints_once() -> None:
    """U15: the trainer class of ``trainer.py`` makes the accelerator; ``main()`` of the script then saved its figure
    under ``if PartialState().is_main_process:`` without importing ``PartialState`` (a NameError after training), and
    printed ``done`` on every process."""
    script = """\
import matplotlib.pyplot as plt
import torch
from trainer import Trainer


def main():
    trainer = Trainer(torch.nn.Linear(4, 1))
    losses = trainer.train(torch.randn(64, 4), torch.randn(64, 1))
    plt.plot(losses)
    plt.savefig("training_metrics.png")
    print("done")


if __name__ == "__main__":
    main()
"""
    trainer = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model):
        self.model = model

    def train(self, X, y, epochs=2):
        loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        losses = []
        for epoch in range(epochs):
            for xb, yb in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(self.model(xb), yb)
                loss.backward()
                optimizer.step()
            losses.append(loss.item())
        return losses
"""
    result = convert_source(script, path="main.py", modules=[ModuleText("trainer", "trainer.py", trainer)])
    assert result.status == "converted", result.reason
    assert "from accelify.runtime import PartialState\n" in result.new
    assert "    if PartialState(" in result.new and ".is_main_process:\n        plt.savefig(\"training_metrics.png\")\n" in result.new
    assert '    PartialState(' in result.new and '.print("done")' in result.new


def test_a_data_cache_built_behind_an_existence_check_is_built_by_the_main_process_first() -> None:
    """U2 (an NCF recommender): ``if not os.path.exists(DATA): os.makedirs(DATA); ...; np.save(...)`` then every run
    ``np.load(...)``: the save on the main process alone, with no wait, and a folder another process made first
    (FileNotFoundError on 3 launches of 3). The block goes under ``main_process_first``."""
    code = """\
import os
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
if not os.path.exists("Data"):
    os.makedirs("Data")
    np.save(os.path.join("Data", "data.npy"), np.random.rand(64, 4).astype(np.float32))
data = np.load(os.path.join("Data", "data.npy"))
loader = DataLoader(TensorDataset(torch.from_numpy(data)), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in loader:
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
"""
    new = converted(code)
    assert 'with accelerator.main_process_first():\n    if not os.path.exists("Data"):\n        os.makedirs("Data")\n' in new, new


def test_a_legacy_cuda_tensor_type_in_a_model_is_made_on_the_process_device() -> None:
    """U2: ``torch.cuda.FloatTensor(batch_size, size)`` in the model's forward was left (a crash on the CPU, the
    current CUDA device on GPUs) and unreported."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class OneHot(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, idx):
        onehot = torch.cuda.FloatTensor(idx.size(0), 8)
        onehot.zero_()
        onehot.scatter_(1, idx.view(-1, 1), 1)
        return self.fc(onehot)


loader = DataLoader(TensorDataset(torch.randint(0, 8, (32,)), torch.randn(32, 1)), batch_size=8)
model = OneHot().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for idx, y in loader:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(idx.cuda()), y.cuda()).backward()
    opt.step()
"""
    new = converted(code)
    assert "onehot = torch.empty(idx.size(0), 8, dtype=torch.float32, device=PartialState().device)\n" in new, new
    assert "PartialState" in new.split("class OneHot")[0]


def test_a_model_rebound_for_inference_after_the_training_is_not_its_creation() -> None:
    """U13 (a triplet network): ``model = LoadBestModel(load_model)`` after the last epoch, through the factory that
    made the trained model, was taken for the model created after the training started (ACC008, refused)."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_model():
    net = torch.nn.Linear(4, 1)
    placed = net.to("cpu")
    return placed


if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    # Load best model
    model = make_model()
"""
    result = convert_source(code)
    assert result.status == "converted", result.reason
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in result.new


def test_a_hit_ratio_listed_from_a_helper_that_returns_ints_is_gathered() -> None:
    """U2 (an NCF recommender): ``HR.append(hit(item, recommends))``, ``hit`` returning ``1`` under ``if gt_item in
    pred_items:`` and ``0`` after it, was taken for a value every process computes alike (constants returned) and left
    per process, unwarned: the printed hit ratio was one process's users'. What a function returns is decided on its
    caller's values when a ``return`` sits under a test on them; the list, of ints, is gathered."""
    code = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


def hit(gt_item, pred_items):
    if gt_item in pred_items:
        return 1
    return 0


def metrics(model, loader, top_k):
    HR = []
    for user, item in loader:
        prediction = model(item.float().unsqueeze(1)).view(-1)
        _, indices = torch.topk(prediction, top_k)
        HR.append(hit(item[0], torch.take(item, indices)))
    return np.mean(HR)


loader = DataLoader(TensorDataset(torch.arange(40), torch.randint(0, 50, (40, 10))), batch_size=1)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for user, item in loader:
    optimizer.zero_grad()
    model(item.float().unsqueeze(-1)).mean().backward()
    optimizer.step()
print(metrics(model, loader, 3))
"""
    new = converted(code)
    assert "    HR = accelerator.gather(torch.tensor(HR, device=accelerator.device)).tolist()\n" in new, new
    assert codes(code) == []


def test_a_test_loader_paired_with_a_list_by_the_loop_index_is_left_out_of_prepare() -> None:
    """U1 (speech commands): ``test_file = path_leaf(dataset_test.spects[index][0])`` beside each prediction of a
    batch-size-1 test loader: prepared, each process counts its own batches from 0, so the names and the predictions
    no longer pair (and the gathered pass crashed ``classes[prediction]``). At stop 39 reported (ACC065); now the
    loader is left out of prepare (every process walks it whole, as the original did), and nothing is reported; a
    training loop's index (it counts steps) is not such a pairing."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Spects(TensorDataset):
    def __init__(self, n):
        super().__init__(torch.randn(n, 4))
        self.spects = [(f"{i}.wav", 0) for i in range(n)]


dataset_test = Spects(6)
test_loader = DataLoader(dataset_test)
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for index, (x, y) in enumerate(train_loader):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    if index == 0:
        print(dataset_test.spects[index])
predictions = []
for index, (x,) in enumerate(test_loader):
    _, prediction = model(x).max(1)
    predictions.append(dataset_test.spects[index][0] + "," + str(prediction.item()))
print(predictions)
"""
    assert [c for c in codes(code) if c.startswith("ACC065")] == [], codes(code)
    new = converted(code)
    assert "model, opt, train_loader = accelerator.prepare(model, opt, train_loader)\n" in new, new
    assert "gather" not in new, new


# U13 (a triplet network): a data set of the program that downloads its tensors with ``torch.save`` in a ``download()``
# and writes its triplet list with ``open(p, "w")`` while it is built, then reads both back
TRIPLET_DATA = """\
import csv
import os

import numpy as np
import torch
import torch.utils.data as data


class Triplets(data.Dataset):
    def __init__(self, root, n, train=True, download=False):
        self.root = root
        self.train = train
        if download:
            self.download()
        self.data = torch.load(os.path.join(root, "data.pt"))
        self.make_list(n)
        self.triplets = [[int(v) for v in line.split()] for line in open(os.path.join(root, self.list_file()))]

    def list_file(self):
        return "train.txt" if self.train else "test.txt"

    def download(self):
        if os.path.exists(os.path.join(self.root, "data.pt")):
            return
        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, "data.pt"), "wb") as f:
            torch.save(torch.randn(100, 4), f)

    def make_list(self, n):
        if os.path.exists(os.path.join(self.root, self.list_file())):
            return
        rows = np.random.randint(0, 100, size=(n, 3))
        with open(os.path.join(self.root, self.list_file()), "w") as f:
            csv.writer(f, delimiter=" ").writerows(rows.tolist())

    def __len__(self):
        return len(self.triplets)

    def __getitem__(self, i):
        a, b, c = self.triplets[i]
        return self.data[a], self.data[b], self.data[c]
"""

TRIPLET_TRAIN = """\
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from data import Triplets


def load(batch_size):
    trainset = Triplets("cache", 64, train=True, download=True)
    testset = Triplets("cache", 32, train=False)
    return DataLoader(trainset, batch_size, shuffle=True), DataLoader(testset, batch_size)


def evaluate(test_loader):
    losses = []
    for a, p, n in test_loader:
        losses.append(F.triplet_margin_loss(model(a), model(p), model(n)).item())
    losses = np.mean(losses)
    return losses


if __name__ == "__main__":
    train_loader, test_loader = load(8)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for a, p, n in train_loader:
        loss = F.triplet_margin_loss(model(a), model(p), model(n))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(evaluate(test_loader))
"""


def test_a_data_set_that_writes_files_while_it_is_built_is_built_on_the_main_process_first() -> None:
    """U13: the triplet list was written on the main process and read at once by every process (FileNotFoundError on
    process 1); the ``download=True`` set was under ``main_process_first`` with the save rule's barriers in its
    ``download()`` (a hang the first time it really downloads). Each construction goes under ``main_process_first``,
    and a save in a data set's methods has no barrier."""
    result = convert_source(TRIPLET_TRAIN, path="train.py", modules=[ModuleText("data", "data.py", TRIPLET_DATA)])
    assert result.status == "converted", result.reason
    new, data_py = result.new, result.companions[0].new
    assert "    with accelerator.main_process_first():\n        trainset = Triplets(" in new, new
    assert "    with accelerator.main_process_first():\n        testset = Triplets(" in new, new
    assert "wait_for_everyone" not in data_py, data_py
    assert "        if self.accelerator.is_main_process:\n            with open(os.path.join(self.root, self.list_file()), \"w\")" in data_py
    assert [w.code for w in result.warnings] == [], [w.format() for w in result.warnings]


def test_a_list_rebound_to_its_mean_is_summarised() -> None:
    """U13's ``evaluate_test``: ``losses = np.mean(losses)`` then ``return losses`` was not taken for a summary of the
    list (the return read it too), so the list was not gathered. Here every process's per-batch losses are gathered
    into one list before the mean (the forwards taken out of one statement: ``tests/e2e/test_gathered_batches.py``'s
    ``triplet``)."""
    result = convert_source(TRIPLET_TRAIN, path="train.py", modules=[ModuleText("data", "data.py", TRIPLET_DATA)])
    new = result.new
    assert ("    losses = accelerator.gather(torch.tensor(losses, dtype=torch.float64, device=accelerator.device)).tolist()\n"
            "    losses = np.mean(losses)\n    return losses\n") in new, new
    kept = convert_source(TRIPLET_TRAIN.replace("    losses = np.mean(losses)\n    return losses", "    return losses, np.mean(losses)"),
                          path="train.py", modules=[ModuleText("data", "data.py", TRIPLET_DATA)])
    assert "accelerator.gather(" not in kept.new and "ACC028" in [w.code for w in kept.warnings], [w.format() for w in kept.warnings]


def test_u1_validation_test_file_and_best_weights_reload_convert() -> None:
    """U1 after stop 40: the validation's ``target = model(x).to(device)`` (the forward taken out, gathered before the
    statement) and its two sums run per original batch (ACC042 before); ``output_file = open("test_y", "w")`` written
    in a loop and closed is opened and written on the main process (ACC024 before); ``test()`` loads the best weights
    ``train()`` saved under the same name after a barrier (process 1 read the previous epoch's file: the processes'
    parameters parted, caught by the runtime's sentinel at ``end_training``)."""
    code = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def validate(model, e):
    loss_func = nn.CrossEntropyLoss()
    validation_loss = 0.0
    correct_predictions = 0
    model.eval()
    for data, labels in validation_loader:
        target = model(data.to(device)).to(device)
        loss = loss_func(target, labels.to(device))
        validation_loss += loss.item()
        _, prediction = target.max(1)
        correct_predictions += (prediction.to(device) == labels.to(device)).sum()
    print(
        '\\nValidation set: Accuracy: {:.0f}%\\n'.format(100. * correct_predictions / len(validation_loader.dataset)))
    print(f'Validation Epoch {e + 1} \\t\\t Validation Loss: {validation_loss / len(validation_loader)}')
    return validation_loss / len(validation_loader)


def test(model):
    model.load_state_dict(torch.load("best/model.pt"))
    lines = [str(model(torch.ones(1, 4).to(device)).argmax().item())]
    output_file = open("test_y", "w")
    for y in lines:
        output_file.write(y + "\\n")
    output_file.close()


def train(model, optimizer):
    best = float("inf")
    for data, target in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(data.to(device)), target.to(device)).backward()
        optimizer.step()
    loss = validate(model, 0)
    if loss <= best:
        torch.save(model.state_dict(), "best/model.pt")
    test(model)


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,))), batch_size=4)
    validation_loader = DataLoader(TensorDataset(torch.randn(6, 4), torch.randint(0, 3, (6,))))
    model = nn.Linear(4, 3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, optimizer)
"""
    result = convert_source(code, path="ex5.py")
    new = result.new
    assert [w.code for w in result.warnings] == [], [w.format() for w in result.warnings]
    assert "        for output, labels in zip(output.split(validation_loader.batch_sampler.batch_size), " in new, new
    assert "            target = output.to(device)\n" in new, new
    assert "    return validation_loss / len(validation_loader.batch_sampler.batch_sampler)\n" in new, new
    assert '    accelerator.wait_for_everyone()\n    accelerator.unwrap_model(model).load_state_dict(torch.load("best/model.pt"' in new, new
    assert '    output_file = open("test_y", "w") if accelerator.is_main_process else None\n' in new, new


def test_u15_table_predictions_and_data_set_prints_of_the_entry_script_once() -> None:
    """U15 again (sixteenth stop): the entry script's ``predictions_df.to_csv(p)`` (never read back) was reported as a
    race (ACC018) where its figures were already saved on the main process; the data set class of a third module,
    run by ``main()`` before the trainer makes the accelerator, printed its sizes on every process."""
    script = """\
import pandas as pd
import torch
from dataset import Data
from trainer import Trainer


def main():
    X, y = Data().load()
    trainer = Trainer(torch.nn.Linear(4, 1))
    trainer.train(X, y)
    predictions_df = pd.DataFrame({"y": trainer.model(X).detach().flatten().numpy()})
    predictions_df.to_csv("predictions.csv", index=False)


if __name__ == "__main__":
    main()
"""
    dataset = """\
import torch


class Data:
    def load(self):
        X, y = torch.randn(64, 4), torch.randn(64, 1)
        print(f"train set size: {X.shape[0]}")
        return X, y

    def __getitem__(self, i):
        print(i)
"""
    trainer = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model):
        self.model = model

    def train(self, X, y, epochs=2):
        loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        for epoch in range(epochs):
            for xb, yb in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(self.model(xb), yb)
                loss.backward()
                optimizer.step()
            print(epoch, loss.item())
"""
    result = convert_source(script, path="main.py", modules=[ModuleText("trainer", "trainer.py", trainer),
                                                             ModuleText("dataset", "dataset.py", dataset)])
    assert result.status == "converted", result.reason
    assert not result.warnings, result.warnings
    assert ".is_main_process:\n        predictions_df.to_csv(\"predictions.csv\", index=False)\n" in result.new
    data = next(c.new for c in result.companions if c.path == "dataset.py")
    assert "from accelify.runtime import PartialState\n" in data
    assert '        PartialState(cpu=True).print(f"train set size: {X.shape[0]}")\n' in data  # the accelerator's state
    assert "        print(i)\n" in data  # a data set's ``__getitem__`` runs in the loader's workers: left


def test_lists_extended_after_a_sum_of_batch_means_run_per_original_batch_too() -> None:
    """U15's ``evaluate``: ``total_loss += loss.item()`` of a gathered pass, then ``all_preds.extend(y_pred...)``:
    the sum was reported (ACC042) because the lists read the gathered rows after it; extending a list by the rows of
    each original batch in turn gives the same list, so they run per batch with the sum."""
    code = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    total_loss = 0
    all_preds = []
    with torch.no_grad():
        for X_batch, y_batch in loader:
            y_pred = model(X_batch)
            loss = torch.nn.functional.mse_loss(y_pred, y_batch)
            total_loss += loss.item()
            all_preds.extend(y_pred.cpu().numpy())
    return total_loss / len(loader), np.array(all_preds)


def main():
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(TensorDataset(torch.randn(40, 3), torch.randn(40, 1)), batch_size=8)
    val = DataLoader(TensorDataset(torch.randn(10, 3), torch.randn(10, 1)), batch_size=4)
    for x, y in train:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    print(evaluate(model, val))


if __name__ == "__main__":
    main()
"""
    new = converted(code)
    assert not codes(code)
    assert ("        for y_pred, y_batch in zip(y_pred.split(loader.batch_sampler.batch_size), "
            "y_batch.split(loader.batch_sampler.batch_size)):\n") in new, new
    assert "                all_preds.extend(y_pred.cpu().numpy())\n" in new, new
    assert "return total_loss / len(loader.batch_sampler.batch_sampler), np.array(all_preds)" in new, new
    # a statement after the lists reading the rows: the pass is not split (it would read the last batch's)
    later = code.replace("            all_preds.extend(y_pred.cpu().numpy())\n",
                         "            all_preds.extend(y_pred.cpu().numpy())\n            print(y_pred.shape)\n")
    assert codes(later) == ["ACC042:13"]


def test_an_evaluation_reading_each_batch_first_row_walks_its_loader_whole() -> None:
    """U2 (NCF): each test batch is one user's positive item first and its negatives, ``hit(item[0], recommend)`` per
    batch, in a helper of another module; ``NDCG`` (a list of a tensor or 0 per user) could not be gathered (ACC028).
    Now the test loader is left out of ``prepare`` (every process ranks every user, as the original did), and the
    helper's ``.cuda()`` calls, which the accelerator does not reach, go to the process state's device."""
    script = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
import evaluate

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
test_loader = DataLoader(TensorDataset(torch.randn(40, 4), torch.arange(40)), batch_size=10)
for epoch in range(2):
    for x, y in train_loader:
        x, y = x.cuda(), y.cuda()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    HR, NDCG = evaluate.metrics(model, test_loader, 3)
    print(np.mean(HR), np.mean(NDCG))
"""
    helper = """\
import numpy as np
import torch


def metrics(model, test_loader, top_k):
    HR, NDCG = [], []
    for x, item in test_loader:
        x = x.cuda()
        item = item.long().cuda()
        _, indices = torch.topk(model(x).flatten(), top_k)
        recommend = torch.take(item, indices)
        HR.append(1 if item[0] in recommend else 0)
        NDCG.append(torch.reciprocal(torch.log2(torch.tensor(2.0))) if item[0] in recommend else 0)
    return HR, NDCG
"""
    result = convert_source(script, path="main.py", modules=[ModuleText("evaluate", "evaluate.py", helper)])
    assert result.status == "converted", result.reason
    assert not [w for part in (result, *result.companions) for w in part.warnings]
    assert "model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)" in result.new, result.new
    new = result.companions[0].new
    assert "from accelify.runtime import PartialState\n" in new
    assert "        x = x.to(PartialState().device)\n        item = item.long().to(PartialState().device)\n" in new, new
    assert "gather" not in new
    # the first row of something else (a model's output tuple) is no batch group: the loader is prepared
    other = helper.replace("_, indices = torch.topk(model(x).flatten(), top_k)",
                           "out = model(x)\n        _, indices = torch.topk(out[0].flatten(), top_k)")
    other = other.replace("item[0] in recommend", "int(item.sum()) in recommend")
    again = convert_source(script, path="main.py", modules=[ModuleText("evaluate", "evaluate.py", other)])
    assert "test_loader" in again.new.split("accelerator.prepare(")[1].split(")")[0], again.new
