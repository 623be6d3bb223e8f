"""Meters of the program's own class (``AverageMeter``) updated over a prepared loader and read after the loop
(``analysis/meter_sums.py``, ``rules/averages.py``): every summed attribute is reduced right after the loop and the
attributes ``update`` computes from the sums are computed again, whatever holds the meters (one name, a dict literal,
a dict comprehension over names, a list, a ``SimpleNamespace``); a meter not proven stays reported (ACC028)."""

from __future__ import annotations

import textwrap

import pytest

from _convert import codes, converted

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    \"\"\"Computes and stores the average and current value\"\"\"

    def __init__(self, name=""):
        self.name = name
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    @property
    def global_avg(self):
        return self.sum / max(self.count, 1)


model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
"""
LOOP = """\
for x, y in loader:
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
"""


def _script(made: str, updates: str, reads: str) -> str:
    body = textwrap.indent(textwrap.dedent(updates).strip("\n"), "    ")
    return HEAD + textwrap.dedent(made).strip("\n") + "\n" + LOOP + body + "\n" + textwrap.dedent(reads).strip("\n") + "\n"


def _reduced(code: str, attr: str, kind: str) -> str:
    dtype = "dtype=torch.float64, " if kind != "int" else ""
    reduced = f'accelerator.reduce(torch.tensor({code}.{attr}, {dtype}device=accelerator.device), "sum").item()'
    return f"{code}.{attr} = " + (f"type({code}.{attr})({reduced})" if kind == "number" else reduced)


def _meter(code: str, kind: str = "float") -> list[str]:
    """The lines that make the meter ``code`` global: its sum and count reduced, its average computed again."""
    return [_reduced(code, "sum", kind), _reduced(code, "count", "int"), f"{code}.avg = {code}.sum / {code}.count"]


# how the meters are held -> (made, updated in the loop, read after it, the meters reduced in order)
HOLDERS = {
    "one name": ("meter = AverageMeter('Loss')", "meter.update(loss.item(), x.size(0))", "print(meter.avg)", ["meter"]),
    "a dict literal": (
        'meters = {"loss": AverageMeter(), "lr": AverageMeter()}',
        'meters["loss"].update(loss.item())\nmeters["lr"].update(optimizer.param_groups[0]["lr"])',
        'print(meters["loss"].global_avg, meters["lr"].avg)\nstats = {k: meter.global_avg for k, meter in meters.items()}',
        ['meters["loss"]', 'meters["lr"]']),
    "a dict comprehension over names": (
        'meters = {name: AverageMeter(name) for name in ("loss", "acc")}',
        'meters["loss"].update(loss.item(), x.size(0))\n'
        'meters["acc"].update((out.argmax(1) == y).float().mean().item(), x.size(0))',
        "print([meter.avg for meter in meters.values()])",
        ['meters["loss"]', 'meters["acc"]']),
    "a list": (
        "meters = [AverageMeter(), AverageMeter()]",
        "meters[0].update(loss.item(), x.size(0))\nmeters[1].update(out.abs().mean().item())",
        "print(meters[0].avg, [m.global_avg for m in meters])",
        ["meters[0]", "meters[1]"]),
    "attributes of one object": (
        "import types\nstats = types.SimpleNamespace(loss=AverageMeter(), acc=AverageMeter())",
        "stats.loss.update(loss.item(), x.size(0))\nstats.acc.update((out.argmax(1) == y).sum().item() / x.size(0))",
        "print(stats.loss.avg, stats.acc.global_avg)",
        ["stats.loss", "stats.acc"]),
}


# reads after the loop (of ``meter``, fed ``loss.item()``) -> whether the meter is reduced (else reported)
READS = {
    "an f-string of its average": ('print(f"loss {meter.avg:.4f}")', True),
    "str.format of its average by keyword (the ImageNet example)": ("print(' * Loss {meter.avg:.3f}'.format(meter=meter))", True),
    "str.format by position, concatenated": ("print('Loss {0.global_avg:.3f} '\n      '({0.sum})'.format(meter))", True),
    "str.format of its last value": ("print('Loss {loss.val:.3f}'.format(loss=meter))", False),
    "str.format of the meter itself": ("print('Loss {}'.format(meter))", False),
}


@pytest.mark.parametrize("name", list(READS))
def test_what_a_read_after_the_loop_reads_decides(name: str) -> None:
    reads, reduced = READS[name]
    source = _script("meter = AverageMeter()", "meter.update(loss.item(), x.size(0))", reads)
    out = converted(source)
    assert (_reduced("meter", "count", "int") in out) is reduced, out
    assert ("ACC028" in {c.split(":")[0] for c in codes(source)}) is not reduced


@pytest.mark.parametrize("name", list(HOLDERS))
def test_meters_are_reduced_right_after_the_loop(name: str) -> None:
    made, updates, reads, meters = HOLDERS[name]
    source = _script(made, updates, reads)
    out = converted(source)
    last_update = textwrap.dedent(updates).strip().splitlines()[-1]
    after = out.split("    " + last_update + "\n", 1)[1].splitlines()
    kinds = {"meters[1]": "float", "stats.acc": "float"}  # an ``.item()`` of a mean, a quotient: floats
    expected = [line for code in meters for line in _meter(code, kinds.get(code, "float"))]
    assert after[:len(expected)] == expected, out
    assert not codes(source), codes(source)
    assert converted(out) == out  # converting again adds nothing


def test_the_learning_rates_meter_keeps_its_average() -> None:
    # every process feeds the same learning rate: its sum and count are both N times one process's, so the average
    # is the same, and the count is the original's number of steps (it walked N times as many)
    made, updates, reads, _ = HOLDERS["a dict literal"]
    out = converted(_script(made, updates, reads))
    assert _reduced('meters["lr"]', "sum", "float") in out and _reduced('meters["lr"]', "count", "int") in out


# not proven: (made, updated, read after the loop); each is reported at the update (line of the first update)
NOT_PROVEN = {
    "a class not of the program": (
        "from meters import AverageMeter as Meter\nmeter = Meter()", "meter.update(loss.item())", "print(meter.avg)"),
    "the last value read after the loop": ("meter = AverageMeter()", "meter.update(loss.item())", "print(meter.val)"),
    # (a tensor fed is reduced as a tensor now: tests/codemods/test_field_triage.py, L9)
    "the holder handed whole to a function": (
        'meters = {"loss": AverageMeter()}', 'meters["loss"].update(loss.item())', "print(meters)"),
    "a key the holder does not make": (
        'meters = {"loss": AverageMeter()}', 'meters["loss"].update(loss.item())\nmeters["acc"].update(1.0)',
        'print(meters["loss"].avg)'),
}


@pytest.mark.parametrize("name", list(NOT_PROVEN))
def test_meters_not_proven_are_reported(name: str) -> None:
    made, updates, reads = NOT_PROVEN[name]
    source = _script(made, updates, reads)
    found = codes(source)
    assert "ACC028" in {c.split(":")[0] for c in found}, found
    assert "accelerator.reduce" not in converted(source)


def test_a_meter_whose_update_does_more_than_add_is_reported() -> None:
    # ``self.history.append(val)``: a side effect the reduction would not make global
    source = _script("meter = AverageMeter()", "meter.update(loss.item())", "print(meter.avg)").replace(
        "        self.val = val\n", "        self.val = val\n        print(val)\n")
    assert "ACC028" in {c.split(":")[0] for c in codes(source)}
    assert "accelerator.reduce" not in converted(source)


def test_meters_under_split_batches_are_reported() -> None:
    # a converted DataParallel script: every process walks every step with 1/N of each batch, so a meter fed once a
    # step (``n=1``) would count N times the original's steps: not proven, reported
    source = _script("model = torch.nn.DataParallel(model)\nmeter = AverageMeter()", "meter.update(loss.item())",
                     "print(meter.avg, meter.count)")
    out = converted(source)
    assert "Accelerator(split_batches=True)" in out and "accelerator.reduce" not in out
    assert "ACC028" in {c.split(":")[0] for c in codes(source)}


SMOOTHED = """\
import torch
from collections import deque
from torch.utils.data import DataLoader, TensorDataset


class SmoothedValue:
    def __init__(self, window_size=20):
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.deque.append(value)
        self.count += n
        self.total += value * n

    @property
    def avg(self):
        return torch.tensor(list(self.deque)).mean().item()

    @property
    def global_avg(self):
        return self.total / self.count


model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
loss_meter = SmoothedValue()
""" + LOOP + "    loss_meter.update(loss.item(), n=x.size(0))\n"


@pytest.mark.parametrize(("read", "reduced"), [("loss_meter.global_avg", True), ("loss_meter.avg", False)])
def test_a_windowed_meter_is_reduced_where_only_its_sums_are_read(read: str, reduced: bool) -> None:
    # DeiT's SmoothedValue: ``global_avg`` reads the sums (made global), the windowed ``avg`` the last values (not)
    source = SMOOTHED + f"print({read})\n"
    out = converted(source)
    assert ('loss_meter.count = accelerator.reduce(torch.tensor(loss_meter.count, device=accelerator.device), "sum").item()'
            in out) is reduced, out
    assert ("ACC028" in {c.split(":")[0] for c in codes(source)}) is not reduced


TRAINER = HEAD + """

class Trainer:
    def __init__(self):
        self.losses = AverageMeter()

    def train_epoch(self):
        for x, y in loader:
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            self.losses.update(loss.item(), x.size(0))
        print(self.losses.avg)


Trainer().train_epoch()
"""


def test_a_meter_a_trainer_keeps_in_an_attribute_is_reported() -> None:
    # ``self.losses`` may sum over several calls of the method (made in ``__init__``): not reduced, but never silent
    assert [c.split(":")[0] for c in codes(TRAINER)] == ["ACC028"]
    assert "accelerator.reduce" not in converted(TRAINER)


@pytest.mark.parametrize(("made", "read", "reduced"), [
    ("        self.losses = AverageMeter()\n", "self.losses.avg", True),  # made again before each pass: its own sums
    ("        self.losses = AverageMeter()\n", "self.losses.val", False),  # the last value: not proven
    ("        if x is None:\n            self.losses = AverageMeter()\n", "self.losses.avg", False),  # maybe not made again
])
def test_a_trainers_meter_made_again_before_the_loop_is_reduced(made: str, read: str, reduced: bool) -> None:
    source = TRAINER.replace("    def train_epoch(self):\n", "    def train_epoch(self, x=None):\n" + made).replace(
        "print(self.losses.avg)", f"print({read})")
    out = converted(source)  # the trainer gets the accelerator as ``self.accelerator``
    assert (_reduced("self.losses", "count", "int").replace("accelerator.", "self.accelerator.") in out) is reduced, out
    if reduced:
        assert "        self.losses.avg = self.losses.sum / self.losses.count\n        self.accelerator.print(" in out
    assert ("ACC028" in {c.split(":")[0] for c in codes(source)}) is not reduced


METRIC_LOGGER = SMOOTHED.split("model = torch.nn.Linear")[0] + """\
class MetricLogger:
    def __init__(self):
        self.meters = {}

    def update(self, **kwargs):
        for k, v in kwargs.items():
            self.meters.setdefault(k, SmoothedValue()).update(v)


model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
metric_logger = MetricLogger()
""" + LOOP + "    metric_logger.update(loss=loss.item())\n" + \
    "print({k: meter.global_avg for k, meter in metric_logger.meters.items()})\n"


def test_a_metric_logger_that_makes_its_meters_by_key_is_reported() -> None:
    # DeiT's MetricLogger: ``update(**kwargs)`` makes a meter per keyword as it goes; not proven, reported
    assert [c.split(":")[0] for c in codes(METRIC_LOGGER)] == ["ACC028"]
    assert "accelerator.reduce" not in converted(METRIC_LOGGER)


MADE_AGAIN_FOR_VALIDATION = """import torch
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    def __init__(self):
        self.sum = 0.0
        self.count = 0
        self.avg = 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
train_loader = DataLoader(data, batch_size=8, shuffle=True)
val_loader = DataLoader(data, batch_size=8)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    avg_loss = AverageMeter()
    avg_prob = AverageMeter()
    for x, y in train_loader:
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        avg_loss.update(loss.item(), x.shape[0])
        avg_prob.update(out.mean().item(), x.shape[0])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(epoch, avg_loss.avg, avg_prob.avg)
    avg_prob = AverageMeter()
    for x, y in val_loader:
        with torch.no_grad():
            out = model(x)
        avg_prob.update(out.mean().item())
    print("val", avg_prob.avg)
"""


def test_a_meter_made_again_under_its_name_for_the_validation_is_reduced_for_the_training() -> None:
    """L9 (SRGAN): ``avg_prob = AverageMeter()`` before the training pass and again before the validation pass of the
    same epoch. The validation's updates and reads are the new meter's; the training meter was reported (ACC028) as
    if updated elsewhere. Its sums are reduced after the training pass."""
    new = converted(MADE_AGAIN_FOR_VALIDATION)
    assert "    avg_prob.avg = avg_prob.sum / avg_prob.count\n    accelerator.print(epoch, avg_loss.avg, avg_prob.avg)" in new
    assert not any(c.startswith("ACC028") for c in codes(MADE_AGAIN_FOR_VALIDATION))


def test_a_meter_updated_again_after_the_loop_without_being_made_again_is_still_reported() -> None:
    """Near miss: without the new meter, the validation's updates add to the training's: not one pass's sums."""
    source = MADE_AGAIN_FOR_VALIDATION.replace("    avg_prob = AverageMeter()\n    for x, y in val_loader:", "    for x, y in val_loader:")
    assert source != MADE_AGAIN_FOR_VALIDATION
    assert "ACC028:29" in codes(source)
