"""The accelerator's arguments as the place it is created sees them (issue 23 class 10)."""

from __future__ import annotations

from accelify.pipeline import convert_source

UNET_LIKE = """\
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset


def train_model(model, device, epochs=1, amp=False):
    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    for epoch in range(epochs):
        for x, y in loader:
            with torch.autocast(device.type, enabled=amp):
                loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(2, 1).to(device)
    train_model(model, device, epochs=2, amp=args.amp)
"""


def test_a_flag_passed_to_the_training_function_is_read_where_the_accelerator_is_created() -> None:
    """``enabled=amp`` is ``train_model``'s parameter; the accelerator goes in the ``__main__`` block that calls it,
    where the flag is ``args.amp``: it reads ``args.amp``, after ``args`` exists (a NameError before)."""
    result = convert_source(UNET_LIKE)
    assert result.status == "converted", [w.format() for w in result.warnings]
    lines = result.new.splitlines()
    created = next(i for i, line in enumerate(lines) if "Accelerator(" in line and "import" not in line)
    assert 'mixed_precision="fp16" if args.amp' in lines[created]
    assert created > next(i for i, line in enumerate(lines) if line.strip().startswith("args = "))
    compile(result.new, "train.py", "exec")


TITANIC_LIKE = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
net = torch.nn.Linear(8, 1)
optm = torch.optim.Adam(net.parameters(), lr=0.003)
data_train = DataLoader(TensorDataset(torch.randn(16, 8), torch.randn(16, 1)), batch_size=4)
cuda_available = False  # torch.cuda.is_available()
if cuda_available == True:
    device = torch.device("cuda:0")
else:
    device = torch.device("cpu")
for epoch in range(2):
    net.to(device)
    for x, y in data_train:
        x, y = x.to(device), y.to(device)
        net.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        optm.step()
"""


def test_a_constant_flag_bound_after_the_loader_is_written_into_the_accelerator() -> None:
    """marcinl/titanic-dnn (set G): the accelerator must come before ``prepare``, right after the loader, but
    ``cuda_available`` is set after it: ``Accelerator(cpu=not cuda_available == True)`` there raised NameError on
    every run. A constant (or a device-availability test) is written in its place."""
    result = convert_source(TITANIC_LIKE)
    assert result.status == "converted", result.warnings
    lines = result.new.splitlines()
    creation = next(i for i, line in enumerate(lines) if line.startswith("accelerator = Accelerator("))
    assert lines[creation] == "accelerator = Accelerator(cpu=not False == True)"
    assert creation < next(i for i, line in enumerate(lines) if "accelerator.prepare(" in line)
    namespace: dict[str, object] = {}
    exec(compile(result.new, "titanic_like.py", "exec"), namespace)  # runs on one process: no NameError


SIMCLR_LIKE = """\
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, *args, **kwargs):
        self.args = kwargs["args"]
        self.model = kwargs["model"]
        self.optimizer = kwargs["optimizer"]

    def train(self, loader):
        scaler = torch.cuda.amp.GradScaler(enabled=self.args.fp16_precision)
        for x, y in loader:
            with torch.cuda.amp.autocast(enabled=self.args.fp16_precision):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16-precision", action="store_true")
    args = parser.parse_args()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
    trainer = Trainer(model=model, optimizer=optimizer, args=args)
    trainer.train(loader)


if __name__ == "__main__":
    main()
"""


def test_a_trainers_flag_stored_from_its_constructor_is_read_as_the_construction_passes_it() -> None:
    """Set I's I10 (SimCLR, W13): the AMP flag is ``self.args.fp16_precision`` in ``Trainer.train``; the accelerator is
    created in ``main()``, where no ``self`` exists (a NameError at the first line before). ``self.args`` holds
    ``kwargs["args"]``, and ``main`` builds the trainer with ``args=args``: the argument reads ``args.fp16_precision``,
    after ``args`` exists. The same with a plain parameter (``def __init__(self, model, optimizer, args)``), and with
    the flag stored as an expression of one (``self.fp16 = args.fp16_precision``)."""
    plain = SIMCLR_LIKE.replace("def __init__(self, *args, **kwargs):", "def __init__(self, model, optimizer, args):").replace(
        'kwargs["args"]', "args").replace('kwargs["model"]', "model").replace('kwargs["optimizer"]', "optimizer")
    stored = plain.replace("self.args = args", "self.fp16 = args.fp16_precision").replace("self.args.fp16_precision", "self.fp16")
    for source in (SIMCLR_LIKE, plain, stored):
        result = convert_source(source)
        assert result.status == "converted", [w.format() for w in result.warnings]
        lines = result.new.splitlines()
        created = next(i for i, line in enumerate(lines) if "Accelerator(" in line and "import" not in line)
        assert lines[created] == (
            '    accelerator = Accelerator(mixed_precision="fp16" if args.fp16_precision and torch.cuda.is_available() else "no")')
        assert lines[created - 1] == "    args = parser.parse_args()"
        assert "self.args" not in lines[created]
        compile(result.new, "train.py", "exec")


def test_a_trainers_flag_that_cannot_be_followed_to_the_creation_site_is_refused_naming_it() -> None:
    """``self.args`` made in ``__init__`` by a call (not handed in): ``main`` has no name for it, so the accelerator
    cannot read the flag where it is created; the file is refused (ACC044) naming the argument, never written with
    ``self`` in ``main``."""
    source = SIMCLR_LIKE.replace('self.args = kwargs["args"]', "self.args = parse_options()").replace(
        "class Trainer:", "def parse_options():\n    return argparse.Namespace(fp16_precision=False)\n\n\nclass Trainer:")
    result = convert_source(source)
    assert result.status != "converted" and result.new == source
    warning = next(w for w in result.warnings if w.code == "ACC044")
    text = warning.format()
    assert "self.args.fp16_precision" in text and "`self`" in text and "Trainer.train" in text and "`main`" in text


MPS_CHAIN_AMP = """\
import argparse
import torch
from torch import nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    args = parser.parse_args()
    has_mps = torch.backends.mps.is_built()
    device = "mps" if has_mps else "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Linear(2, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(enabled=args.amp and device == "cuda")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=2)
    for (x,) in loader:
        with torch.autocast("cuda", enabled=args.amp and device == "cuda"):
            loss = model(x.to(device)).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""


def test_amp_on_a_cuda_device_chosen_after_mps_reads_when_that_chain_picks_cuda() -> None:
    """Set I's I4 shape (W5) with AMP behind ``device == "cuda"``: the device is CUDA when the MPS probe fails and CUDA
    is available, so the accelerator reads ``not has_mps and torch.cuda.is_available()`` (not the ``has_mps`` of the
    first branch), after ``has_mps`` exists; no CPU pin."""
    result = convert_source(MPS_CHAIN_AMP)
    assert result.status == "converted", [w.format() for w in result.warnings]
    lines = result.new.splitlines()
    created = next(i for i, line in enumerate(lines) if "Accelerator(" in line and "import" not in line)
    assert lines[created] == ('    accelerator = Accelerator(mixed_precision="fp16" if args.amp and not has_mps and '
                              'torch.cuda.is_available() else "no")')
    assert created > lines.index("    has_mps = torch.backends.mps.is_built()")
    assert "    device = accelerator.device" in lines
