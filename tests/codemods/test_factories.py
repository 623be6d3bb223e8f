"""Objects built by a factory handed the module to build from: ``config.init_obj('optimizer', torch.optim, params)``,
``getattr(torch.optim, name)(params)``, ``config.init_obj('data_loader', module_data)`` where ``module_data`` is a
module of the program whose classes are DataLoaders. They are what that module builds, and are prepared as such."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from accelify.codemods.analysis.names import ImportMap
from accelify.codemods.analysis.roles import factory_role
from accelify.pipeline import convert_path, convert_source

LOOP = """\
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_getattr_on_torch_optim_builds_an_optimizer() -> None:
    code = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nOPT = 'Adam'\n"
            "loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n"
            "model = torch.nn.Linear(2, 1)\noptimizer = getattr(torch.optim, OPT)(model.parameters(), lr=0.1)\n" + LOOP)
    result = convert_source(code)
    assert result.status == "converted" and not result.warnings, result.warnings
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in result.new


def test_a_config_factory_builds_the_optimizer_the_loader_and_the_model(tmp_path: Path) -> None:
    """pytorch-template's ``config.init_obj``: before, ACC012 said no optimizer was found."""
    files = {
        "config.py": "class Config:\n    def __init__(self, d):\n        self.d = d\n\n"
                     "    def init_obj(self, name, module, *args, **kwargs):\n"
                     "        return getattr(module, self.d[name]['type'])(*args, **self.d[name]['args'], **kwargs)\n",
        "loaders.py": "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
                      "class Synthetic(DataLoader):\n    def __init__(self, batch_size):\n"
                      "        super().__init__(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=batch_size)\n",
        "nets.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                   "        self.fc = torch.nn.Linear(2, 1)\n\n    def forward(self, x):\n        return self.fc(x)\n",
        "train.py": "import torch\nimport loaders as module_data\nimport nets as module_arch\nfrom config import Config\n\n"
                    "config = Config({'d': {'type': 'Synthetic', 'args': {'batch_size': 4}}, 'a': {'type': 'Net', 'args': {}},"
                    " 'o': {'type': 'SGD', 'args': {'lr': 0.1}}})\n"
                    "loader = config.init_obj('d', module_data)\nmodel = config.init_obj('a', module_arch)\n"
                    "optimizer = config.init_obj('o', torch.optim, model.parameters())\n" + LOOP,
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = convert_path(tmp_path / "train.py")
    assert result.status == "converted" and not result.warnings, (result.reason, result.warnings)
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in result.new


def test_only_an_imported_module_makes_a_factory() -> None:
    """``Trainer(model, ...)`` with a variable ``model`` is no factory, even where the program has a module named
    ``model``; ``torch.optim.lr_scheduler`` builds a scheduler."""
    imports = ImportMap()
    for line in ("import torch", "import model.model as module_arch"):
        imports.add(cst.parse_statement(line).body[0])  # type: ignore[attr-defined, arg-type]
    classes = {"model.model.Net": ["torch.nn.Module"]}

    def role(code: str) -> str | None:
        call = cst.parse_expression(code)
        assert isinstance(call, cst.Call)
        return factory_role(call, imports, classes)

    assert role("config.init_obj('arch', module_arch)") == "model"
    assert role("config.init_obj('sched', torch.optim.lr_scheduler, optimizer)") == "scheduler"
    assert role("Trainer(model, criterion)") is None
    assert role("config.init_obj('loss', torch.nn)") is None


def test_an_optimizer_class_handed_in_as_a_parameter_builds_the_optimizer() -> None:
    """``fit(epochs, lr, model, loader, opt_func=torch.optim.SGD)`` makes ``opt_func(model.parameters(), lr)`` (the
    "zero to GANs" course layout, copied by many notebooks). No optimizer was found, and the refusal (ACC012: "no
    optimizer was found to prepare") was false; a call handed a model's parameters that is stepped and zeroed is one."""
    source = (
        "import torch\n\n\n"
        "def fit(epochs, lr, model, loader, opt_func=torch.optim.SGD):\n"
        "    optimizer = opt_func(model.parameters(), lr)\n"
        "    for epoch in range(epochs):\n"
        "        for x, y in loader:\n"
        "            loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "            loss.backward()\n"
        "            optimizer.step()\n"
        "            optimizer.zero_grad()\n\n\n"
        "model = torch.nn.Linear(3, 1)\n"
        "loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), 4)\n"
        "fit(2, 0.1, model, loader)\n"
        "fit(2, 0.01, model, loader, torch.optim.Adam)\n"
    )
    result = convert_source(source, path="train.py")
    assert result.status == "converted", result.reason
    assert "    optimizer = opt_func(model.parameters(), lr)\n" \
           "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in result.new
    assert "accelerator.backward(loss)" in result.new
    counted = convert_source(source.replace("opt_func(model.parameters(), lr)", "count(model.parameters())")
                             .replace("optimizer.step()", "pass").replace("optimizer.zero_grad()", "pass"), path="t.py")
    assert "accelerator.prepare(model, optimizer" not in counted.new  # not stepped and zeroed: no optimizer
