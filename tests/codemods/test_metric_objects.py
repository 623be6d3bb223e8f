"""``analysis/metric_objects.py``: a metric object of the program's own class, fed in a loop over a prepared loader
and read after it, holds one process's share on N processes: reported (ACC028), unless what it is fed is gathered."""

from __future__ import annotations

from pathlib import Path

from accelify.pipeline import convert_source

SHAPE = Path(__file__).parent / "shapes" / "accumulated_metric.py"

METRIC = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Metric:
    def __call__(self, outputs, target, loss):
        raise NotImplementedError


class AccumulatedAccuracyMetric(Metric):
    def __init__(self):
        self.correct = 0
        self.total = 0
        self.values = []

    def __call__(self, outputs, target, loss):
        pred = outputs.argmax(1)
        self.correct += (pred == target).sum().item()
        self.total += target.size(0)
        return self.value()

    def reset(self):
        self.correct = 0
        self.total = 0

    def value(self):
        return 100 * float(self.correct) / self.total


"""

# siamese-triplet's trainer: the metrics arrive as a list through two functions' parameters
FIT = METRIC + """\
def fit(loader, model, optimizer, n_epochs, metrics=[]):
    for epoch in range(n_epochs):
        loss, metrics = train_epoch(loader, model, optimizer, metrics)
        message = "epoch {} loss {:.4f}".format(epoch, loss)
        for metric in metrics:
            message += " {}".format(metric.value())
        print(message)


def train_epoch(loader, model, optimizer, metrics):
    for metric in metrics:
        metric.reset()
    total_loss = 0
    for batch_idx, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        outputs = model(x)
        loss = torch.nn.functional.cross_entropy(outputs, y)
        total_loss += loss.item()
        loss.backward()
        optimizer.step()
        for metric in metrics:
            metric(outputs, y, loss)
    total_loss /= batch_idx + 1
    return total_loss, metrics


loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
fit(loader, model, optimizer, 2, metrics=[AccumulatedAccuracyMetric()])
"""


def _warnings(code: str) -> list[str]:
    result = convert_source(code)
    assert result.status == "converted", result.error
    return [f"{w.code}:{w.line}" for w in result.warnings]


def test_a_metric_object_fed_in_the_training_loop_is_reported() -> None:
    code = SHAPE.read_text(encoding="utf-8")
    line = next(i for i, text in enumerate(code.splitlines(), 1) if text.strip() == "metric(outputs, y)")
    assert _warnings(code) == [f"ACC028:{line}"]


def test_a_list_of_metric_objects_handed_through_parameters_is_reported() -> None:
    line = next(i for i, text in enumerate(FIT.splitlines(), 1) if text.strip() == "metric(outputs, y, loss)")
    assert _warnings(FIT) == [f"ACC028:{line}"]


def test_a_metric_object_that_keeps_a_list_of_per_batch_values_is_reported() -> None:
    """siamese-triplet's ``AverageNonzeroTripletsMetric``: ``self.values.append(loss[1])``, ``np.mean`` of them."""
    code = FIT.replace("self.correct += (pred == target).sum().item()\n        self.total += target.size(0)",
                       "self.values.append((pred == target).sum().item())")
    assert "self.total +=" not in code
    line = next(i for i, text in enumerate(code.splitlines(), 1) if text.strip() == "metric(outputs, y, loss)")
    assert _warnings(code) == [f"ACC028:{line}"]


def test_a_metric_object_fed_gathered_values_is_not_reported() -> None:
    """In an evaluation loop the outputs and targets are gathered first: the object sums every process's batches."""
    code = METRIC + """\
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
metric = AccumulatedAccuracyMetric()
with torch.no_grad():
    for x, y in loader:
        outputs = model(x)
        metric(outputs, y, None)
print(metric.value())
"""
    result = convert_source(code)
    assert "outputs, y = accelerator.gather_for_metrics((outputs, y))" in result.new, result.new
    assert [w.code for w in result.warnings] == []


def test_an_object_that_does_not_sum_into_itself_is_not_a_metric() -> None:
    """A callable of the program's that keeps nothing (a loss function object) is not reported."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Criterion:
    def __call__(self, outputs, target):
        return torch.nn.functional.cross_entropy(outputs, target)


loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = Criterion()
for x, y in loader:
    optimizer.zero_grad()
    outputs = model(x)
    criterion(outputs, y).backward()
    optimizer.step()
    criterion(outputs, y)
print(criterion)
"""
    assert _warnings(code) == []
