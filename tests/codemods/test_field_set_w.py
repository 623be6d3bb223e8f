"""Shapes of the programs tried at the sixteenth stop (set W; docs/FIELD_TESTS.md names them)."""

from __future__ import annotations

from accelify.pipeline import convert_source
from accelify.program import ModuleText

# W4 (a GAN on MNIST): ``train()`` in a package module saves sample images through a helper of another module, which
# a function nothing in the program calls (``save_real_images``, run by another entry script) also calls; the
# device is a dict entry of ``config.py``, read into a local name
W4_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from training_utils import save_image_grid
from config import config


def train():
    device = config["device"]
    loader = DataLoader(TensorDataset(torch.randn(64, 1, 8, 8)), batch_size=8, shuffle=True)
    generator = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Unflatten(1, (1, 8, 8))).to(device)
    optimizer = torch.optim.Adam(generator.parameters(), lr=1e-3)
    for epoch in range(2):
        for (real,) in loader:
            real = real.to(device)
            loss = ((generator(torch.randn(real.size(0), 4, device=device)) - real) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            fake_images = generator(torch.randn(4, 4, device=device))
            save_image_grid(fake_images, folder=f"outputs/epoch_{epoch}", prefix="fake")


if __name__ == "__main__":
    train()
"""

W4_UTILS = """\
import os
import torch
from PIL import Image
from torch.utils.data import DataLoader, TensorDataset


def save_image_grid(images, folder, prefix):
    os.makedirs(folder, exist_ok=True)
    for i, img in enumerate(images):
        Image.fromarray((img[0].cpu().numpy() * 255).astype("uint8")).save(os.path.join(folder, f"{prefix}_{i}.png"))


def save_real_images(num_samples=4, folder="outputs/real"):
    loader = DataLoader(TensorDataset(torch.randn(16, 1, 8, 8)), batch_size=num_samples, shuffle=True)
    (real_imgs,) = next(iter(loader))
    save_image_grid(real_imgs, folder, "real")
"""

W4_CONFIG = """\
import torch

config = {
    "lr": 0.0002,
    "device": "cuda" if torch.cuda.is_available() else "cpu",
}
"""


def test_w4_images_a_helper_saves_are_saved_once_and_the_config_device_is_the_process_s() -> None:
    """The helper's call in ``train()`` was left on every process (each wrote the same files) because a function the
    program never runs also called the helper; and ``.to(device)`` of ``device = config["device"]`` got ACC002 ×3,
    though the conversion made that entry the process's device."""
    result = convert_source(W4_TRAIN, path="train.py", modules=[ModuleText("training_utils", "training_utils.py", W4_UTILS),
                                                                 ModuleText("config", "config.py", W4_CONFIG)])
    assert result.status == "converted", result.reason
    warnings = [w for part in (result, *result.companions) for w in part.warnings]
    assert not warnings, [w.format() for w in warnings]
    assert ("            if accelerator.is_main_process:\n"
            '                save_image_grid(fake_images, folder=f"outputs/epoch_{epoch}", prefix="fake")\n') in result.new, result.new
    config = next(c.new for c in result.companions if c.path == "config.py")
    assert '"device": PartialState().device' in config, config


def test_w6_a_second_string_before_the_imports_keeps_the_accelerator_after_its_import() -> None:
    """W6 (a name classifier): the module's docstring, then a header string copied from another file, then the
    imports: the accelerator was made right after the first string, before the line that imports it (a NameError
    on every process)."""
    code = '''\
"""The module's docstring."""

"""
  * A header copied from another file
"""
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4, shuffle=True)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
'''
    new = convert_source(code, path="train.py").new
    assert new.index("from accelify.runtime import Accelerator\n") < new.index("accelerator = Accelerator()\n"), new
    assert new.startswith('"""The module\'s docstring."""\n\n"""\n  * A header copied from another file\n"""\nimport torch\n'), new


def test_w7_a_count_over_a_validation_loader_of_one_sample_per_batch_counts_each_sample_once() -> None:
    """W7 (a notebook's ``train_model``): ``correct += (yhat == y_test).sum().item()`` over a validation loader of
    batch size 1, divided by ``len(val_set)``, was reduced after the loop over the prepared loader, whose last round
    is completed with duplicates: 6 right of 5 on 2 processes. The loader is left out of ``prepare`` now (every
    process counts every sample once, as the original did)."""
    code = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
train_set, val_set = random_split(TensorDataset(torch.randn(50, 4), torch.zeros(50, dtype=torch.long)), [45, 5])


def train_model(model, train_loader, validation_loader, optimizer, n_epochs):
    n_test = len(val_set)
    for epoch in range(n_epochs):
        for x, y in train_loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        correct = 0
        for x_test, y_test in validation_loader:
            _, yhat = torch.max(model(x_test).data, 1)
            correct += (yhat == y_test).sum().item()
        print("accuracy", correct / n_test)


model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(train_set, batch_size=9)
validation_loader = DataLoader(val_set, batch_size=1)
train_model(model, train_loader, validation_loader, optimizer, 1)
'''
    result = convert_source(code, path="train.py")
    assert not result.warnings, [w.format() for w in result.warnings]
    assert "accelerator.reduce" not in result.new and "gather" not in result.new, result.new
    assert "model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)" in result.new, result.new


def test_w8_click_subcommands_are_trainers_one_run_chooses() -> None:
    """W8 (SimCLR with a supervised baseline): a ``click.group()`` with two ``@cli.command()`` functions, each
    building and training its own model; refused (ACC039: "a run may build more than one of them"), though click runs
    the one subcommand a run names. Each is converted on its own now, and ``click.echo`` prints once."""
    code = '''\
import click
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    return DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)


@click.group()
def cli():
    pass


@cli.command()
@click.option("--epochs", default=2)
def supervised(epochs):
    model = torch.nn.Linear(4, 2)
    loader = make_loader()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        click.echo(f"supervised epoch {epoch + 1}")


@cli.command()
@click.option("--epochs", default=2)
def unsupervised(epochs):
    model = torch.nn.Linear(4, 4)
    loader = make_loader()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(epochs):
        for x, _ in loader:
            optimizer.zero_grad()
            ((model(x) - x) ** 2).mean().backward()
            optimizer.step()
        click.echo(f"unsupervised epoch {epoch + 1}")


if __name__ == "__main__":
    cli()
'''
    result = convert_source(code, path="train.py")
    assert result.status == "converted", result.reason
    assert not result.warnings, [w.format() for w in result.warnings]
    assert result.new.count("    accelerator = Accelerator()\n") == 2, result.new
    assert result.new.count("    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n") == 2
    assert '        accelerator.print(f"supervised epoch {epoch + 1}")\n' in result.new, result.new
    # called by the program itself, one after the other: two trainings of one run, one accelerator for both
    both = convert_source(code.replace("    cli()\n", "    supervised(2)\n    unsupervised(2)\n"), path="train.py").new
    assert both.count("accelerator = Accelerator()") == 1 and "    accelerator = Accelerator()\n    supervised(2)" in both


def test_w8_the_training_ends_outside_the_guard_of_its_last_write() -> None:
    """W8 converted one command at a time: the function's last statement, ``log.to_csv(...)``, is kept to the main
    process, and ``accelerator.end_training()`` was put inside that guard: the main process waited there for the
    others, which had returned (launch rc 1 every time)."""
    code = '''\
import pandas as pd
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = torch.nn.Linear(4, 1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    log = pd.DataFrame({"epoch": [0]})
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    log.to_csv("log.csv", index=False)


if __name__ == "__main__":
    main()
'''
    new = convert_source(code, path="train.py").new
    assert ("    if accelerator.is_main_process:\n        log.to_csv(\"log.csv\", index=False)\n"
            "    accelerator.end_training()\n") in new, new


def test_w8_a_progress_bar_update_sums_nothing_and_an_echo_of_a_summary_runs_everywhere() -> None:
    """W8: ``bar.update(1, [np.mean(losses)])`` of ``with click.progressbar(loader) as bar:`` was reported as a running
    value (ACC028); ``click.echo(summary(model, input_size=...))``, kept to the main process, left a lazy layer's
    weights unmade on the others (DDP refused them): it prints through ``accelerator.print`` now, computed everywhere."""
    code = '''\
import click
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchinfo import summary


def main():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LazyLinear(2))
    click.echo(summary(model, input_size=(1, 4)))
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    with click.progressbar(loader, label="Train") as bar:
        for x, y in bar:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bar.update(1, [np.mean(losses or [0.0])])
    click.echo("done", err=True)


if __name__ == "__main__":
    main()
'''
    result = convert_source(code, path="train.py")
    assert not result.warnings, [w.format() for w in result.warnings]
    assert "    accelerator.print(summary(model, input_size=(1, 4)))\n" in result.new, result.new
    assert '    if accelerator.is_main_process:\n        click.echo("done", err=True)\n' in result.new, result.new


def test_w11_sums_of_a_metric_lambda_and_sums_bound_anew_after_their_print_are_reduced() -> None:
    """W11 (the "eat PyTorch in 20 days" Titanic script): ``metric += metric_func(predictions, labels)``, a lambda
    around scikit-learn's ``accuracy_score``, was of no known kind; and the epoch's ``loss_sum``, printed and then
    bound to 0 again, was taken as read by the test loop below, which sums into the same names: both reported
    (ACC028), the epoch lines process 0's share. Both are reduced now, in both loops."""
    code = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from sklearn.metrics import accuracy_score

train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64, 1)).float()), batch_size=8, shuffle=True)
test = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32, 1)).float()), batch_size=8)
net = torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Sigmoid())
optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
loss_func = torch.nn.BCELoss()
metric_func = lambda y_pred, y_true: accuracy_score(y_true.data.numpy(), y_pred.data.numpy() > 0.5)
for i in range(1, 3):
    loss_sum = 0
    metric = 0
    for step, (features, labels) in enumerate(train, 1):
        optimizer.zero_grad()
        predictions = net(features)
        loss = loss_func(predictions, labels)
        metric += metric_func(predictions, labels)
        loss.backward()
        optimizer.step()
        loss_sum += loss.item()
    print("Epoch:%d Loss: %.3f Metric: %.3f" % (i, loss_sum / step, metric / step))
    loss_sum = 0
    metric = 0

loss_sum = 0
metric = 0
for step, (features, labels) in enumerate(test, 1):
    predictions = net(features)
    metric += metric_func(predictions, labels)
    loss_sum += loss_func(predictions, labels).item()
print("Test Loss: %.3f Metric: %.3f" % (loss_sum / step, metric / step))
'''
    result = convert_source(code, path="train.py")
    assert not result.warnings, [w.format() for w in result.warnings]
    reduced = 'accelerator.reduce(torch.tensor({0}, dtype=torch.float64, device=accelerator.device), "mean").item()'
    for name in ("metric", "loss_sum"):
        assert f"    {name} = {reduced.format(name)}\n" in result.new, result.new  # the epoch's
    # an array of per-class scores (``average=None``) is no float: still reported
    per_class = code.replace("accuracy_score(y_true.data.numpy(), y_pred.data.numpy() > 0.5)",
                             "f1_score(y_true.data.numpy(), y_pred.data.numpy() > 0.5, average=None)").replace(
        "import accuracy_score", "import f1_score")
    assert "ACC028" in [w.code for w in convert_source(per_class, path="train.py").warnings]


def test_a_count_from_a_forward_taken_out_of_its_statement_is_not_reduced_again() -> None:
    """Found while shaping W7: ``_, yhat = torch.max(model(x_test).data, 1)`` under ``no_grad``, after the batch's
    ``.to(device)``: the evaluation rule takes the forward out and gathers it before the statement, and the count of
    ``yhat == y_test`` made from the gathered rows was also reduced after the loop: N times the original's count,
    silently (with ``outputs = model(x_test)`` on a line of its own it was right)."""
    code = '''\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, random_split

device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
data = TensorDataset(torch.randn(50, 4), torch.zeros(50, dtype=torch.long))
train_set, val_set = random_split(data, [45, 5])


def train_model(model, train_loader, validation_loader, criterion, optimizer, n_epochs):
    n_test = len(val_set)
    for epoch in range(n_epochs):
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        correct = 0
        with torch.no_grad():
            for x_test, y_test in validation_loader:
                x_test, y_test = x_test.to(device), y_test.to(device)
                _, yhat = torch.max(model(x_test).data, 1)
                correct += (yhat == y_test).sum().item()
        print("accuracy", correct / n_test, "correct", correct, "of", n_test)


model = nn.Linear(4, 2)
with torch.no_grad():
    model.weight.zero_(); model.bias.copy_(torch.tensor([10.0, -10.0]))
model.to(device)
train_loader = DataLoader(train_set, batch_size=9)
validation_loader = DataLoader(val_set, batch_size=2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
train_model(model, train_loader, validation_loader, nn.CrossEntropyLoss(), optimizer, 1)
'''
    result = convert_source(code, path="train.py")
    assert not result.warnings, [w.format() for w in result.warnings]
    assert "                output, y_test = accelerator.gather_for_metrics((output, y_test))\n" in result.new, result.new
    assert "accelerator.reduce" not in result.new, result.new
