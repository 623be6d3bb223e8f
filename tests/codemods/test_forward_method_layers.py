"""ACC025 on a model method that runs the model's layers from its containers (set M3, issue 23).

A normalizing flow trained only through ``model.log_probability(x)``, whose loop ``for layer in self.layers:
x, ld = layer.inverse(x)`` runs a ``ModuleList``'s items, was converted with no warning: on a prepared model the method
runs on the inner module, bypassing the DistributedDataParallel wrapper, and the runtime sentinel stopped the run at
step 2 (ParametersDifferError). Every way authors reach the layers (a loop, an index, ``enumerate``/``zip``/
``reversed``/``.items()``, a comprehension, a submodule's own method) is a run; reading the layers' parameters is not.
"""

from __future__ import annotations

import pytest

from _convert import codes, converted, dedent

from accelify.pipeline import convert_source
from accelify.program import ModuleText

FLOW = """\
import torch
import torch.nn as nn


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(2))
        self.log_scale = nn.Parameter(torch.zeros(2))

    def forward(self, y):
        return (y - self.shift) * torch.exp(-self.log_scale)

    def inverse(self, y):
        return (y - self.shift) * torch.exp(-self.log_scale), -self.log_scale.sum()


class Flow(nn.Module):
    def __init__(self, n=2):
        super().__init__()
        self.layers = nn.ModuleList([Affine() for _ in range(n)])
        self.heads = nn.ModuleDict({"a": Affine(), "b": Affine()})
        self.norms = nn.ModuleList([nn.Identity() for _ in range(n)])
        self.final = Affine()
        self.base = torch.distributions.Normal(0.0, 1.0)

    def log_probability(self, x):
        log_prob = torch.zeros(x.shape[0])
BODY
        return log_prob + self.base.log_prob(x).sum(1)


model = Flow()
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
for x in torch.randn(4, 16, 2):
    loss = -model.log_probability(x).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def _flow(body: str) -> str:
    return FLOW.replace("BODY\n", "".join(f"        {line}\n" for line in dedent(body).splitlines()))


@pytest.mark.parametrize("body", [
    # the M3 notebook's loop, in reverse
    """
    for layer in reversed(self.layers):
        x, log_det = layer.inverse(x)
        log_prob += log_det
    """,
    "for layer in self.layers:\n    x = layer(x)",
    "for i in range(len(self.layers)):\n    x = self.layers[i](x)",
    "x, log_det = self.layers[-1].inverse(x)\nlog_prob = log_prob + log_det",
    "for i, layer in enumerate(self.layers):\n    x = layer(x) * (i + 1)",
    "for layer, norm in zip(self.layers, self.norms):\n    x = norm(layer(x))",
    "for name, head in self.heads.items():\n    x = head(x)",
    "for head in self.heads.values():\n    x = head(x)",
    "for layer in self.layers.children():\n    x = layer(x)",
    "for name, layer in self.layers.named_children():\n    x = layer(x)",
    'x = self.heads["a"](x)',
    "x = torch.stack([layer(x) for layer in self.layers]).mean(0)",
    "layers = self.layers\nfor layer in layers[1:]:\n    x = layer(x)",
    "outs = []\nfor layer in self.layers:\n    outs.append(layer(x))\nx = torch.stack(outs).mean(0)",
    # a submodule's own method, not only a call of it
    "x, log_det = self.final.inverse(x)\nlog_prob += log_det",
])
def test_training_through_a_method_that_runs_the_layers_of_a_container_is_refused(body: str) -> None:
    code = _flow(body)
    line = next(i for i, text in enumerate(code.splitlines(), 1) if "-model.log_probability(x)" in text)
    assert codes(code) == [f"ACC025:{line}"]
    assert convert_source(code).new == code  # refused: the file is left unchanged


@pytest.mark.parametrize("body", [
    # reads the layers' parameters (a penalty), runs none of them
    "log_prob = log_prob - sum(layer.shift.pow(2).sum() for layer in self.layers)",
    "log_prob = log_prob - sum(p.pow(2).sum() for layer in self.layers for p in layer.parameters())",
    # runs them without gradients (a scale measured under no_grad): no graph leaves them
    "with torch.no_grad():\n    scale = sum(layer(x).abs().mean() for layer in self.layers)\nx = x / scale",
])
def test_a_method_that_reads_the_layers_without_running_them_converts(body: str) -> None:
    code = _flow(body)
    assert codes(code) == [], codes(code)
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in converted(code)


def test_the_same_loop_in_the_forward_called_through_the_prepared_model_converts() -> None:
    """The control: the flow's loop is its ``forward``, and the training calls ``model(x)``; the wrapper runs it."""
    code = _flow("for layer in reversed(self.layers):\n    x, log_det = layer.inverse(x)\n    log_prob += log_det")
    code = code.replace("    def log_probability(self, x):", "    def forward(self, x):").replace(
        "model.log_probability(x)", "model(x)")
    assert codes(code) == [], codes(code)
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in converted(code)


def test_the_layers_loop_of_a_model_defined_in_another_module_is_refused() -> None:
    """M3's ``train_split.py``: the flow's classes are imported from the program's own module (``flows.py``)."""
    flows = _flow("for layer in reversed(self.layers):\n    x, log_det = layer.inverse(x)\n    log_prob += log_det")
    flows, script = flows.split("\n\nmodel = Flow()\n")
    script = "import torch\nfrom flows import Flow\n\nmodel = Flow()\n" + script
    result = convert_source(script, modules=[ModuleText("flows", "flows.py", flows + "\n")])
    assert result.status == "attention" and [w.code for w in result.warnings] == ["ACC025"], result.warnings
    assert result.new == script


BASE_FLOW = """\
import torch
import torch.nn as nn


class BaseFlow(nn.Module):
    def log_probability(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return -x.pow(2).sum(1)


class Flow(BaseFlow):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])


model = Flow()
optimizer = torch.optim.Adam(model.parameters())
for x in torch.randn(4, 8, 2):
    loss = -model.log_probability(x).mean()
    loss.backward()
    optimizer.step()
"""


def test_a_base_class_method_walking_the_layers_its_subclass_builds_is_refused() -> None:
    assert codes(BASE_FLOW) == ["ACC025:21"]


def test_a_subclass_method_walking_the_layers_its_base_builds_is_refused() -> None:
    code = BASE_FLOW.replace("class BaseFlow(nn.Module):", "class Base(nn.Module):\n    def __init__(self):\n"
                             "        super().__init__()\n        self.layers = nn.ModuleList([nn.Linear(2, 2)])\n\n\n"
                             "class BaseFlow(Base):")
    code = code.replace("class Flow(BaseFlow):\n    def __init__(self):\n        super().__init__()\n"
                        "        self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])\n", "class Flow(BaseFlow):\n    pass\n")
    assert "self.layers = nn.ModuleList([nn.Linear(2, 2)])" in code and "for _ in range(3)" not in code
    line = next(i for i, text in enumerate(code.splitlines(), 1) if "-model.log_probability(x)" in text)
    assert codes(code) == [f"ACC025:{line}"]


RECURRENT = """\
import torch
import torch.nn as nn


class Core(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 8)

    def forward(self, x, h):
        return self.cell(x, h)

    def init_hidden(self, batch_size):
        return torch.zeros(batch_size, 8)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.core = Core()
        self.head = nn.Linear(8, 1)

    def forward(self, x, h):
        h = self.core(x, h)
        return self.head(h), h

    def init_hidden(self, batch_size):
        return self.core.init_hidden(batch_size)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(4, 16, 4):
    hidden = model.init_hidden(16)
    out, hidden = model(x, hidden)
    loss = out.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_submodule_method_that_touches_no_weight_is_no_run() -> None:
    """``model.init_hidden(bs)`` handing on the core's ``init_hidden``, which returns zeros: its hidden state feeds
    ``model(x, hidden)``, the training goes through the wrapper, nothing bypasses it."""
    assert codes(RECURRENT) == []
    assert "model, optimizer = accelerator.prepare(model, optimizer)" in converted(RECURRENT)


@pytest.mark.parametrize("initial", [
    "return self.cell(torch.zeros(batch_size, 4))",  # runs the core's layer
    "return torch.tanh(self.cell.weight_hh[:1]).expand(batch_size, 8)",  # reads its weight: gradients reach it
])
def test_a_submodule_method_that_runs_or_reads_its_weights_is_a_run(initial: str) -> None:
    code = RECURRENT.replace("return torch.zeros(batch_size, 8)", initial)
    assert code != RECURRENT
    assert codes(code) == ["ACC025:34"]
