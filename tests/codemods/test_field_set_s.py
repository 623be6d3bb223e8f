"""Shapes of the programs tried this stop (sets S and Q, thirteenth stop; docs/FIELD_TESTS.md names them)."""

from __future__ import annotations

from _convert import codes, converted

from accelify.pipeline import convert_source
from accelify.program import ModuleText

CHOSEN_OPTIMIZER_CLASS = """\
import torch
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader, kind):
        self.model = model
        self.loader = loader
        if kind == "adam":
            optimizer_class = optim.Adam
        else:
            optimizer_class = optim.SGD
        self.opt = optimizer_class(self.model.parameters(), lr=0.01)

    def train(self):
        for x, y in self.loader:
            self.opt.zero_grad()
            torch.nn.functional.mse_loss(self.model(x), y).backward()
            self.opt.step()


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    trainer = Trainer(model, loader, "adam")
    for epoch in range(2):
        trainer.train()


if __name__ == "__main__":
    main()
"""


def test_an_optimizer_built_through_a_chosen_class_is_an_optimizer() -> None:
    """S5 (jsauca/Pix2Pix_Plans' trainer): ``optimizer_class = optim.Adam`` (or ``optim.SGD``) then
    ``optimizer_class(self._g_net.parameters(), ...)``. Not seen as an optimizer, the file was refused with ACC012,
    "no optimizer was found to prepare", which was not what stopped it. It is one: prepared with the model."""
    assert not any(c.startswith("ACC012") for c in codes(CHOSEN_OPTIMIZER_CLASS))
    new = converted(CHOSEN_OPTIMIZER_CLASS)
    assert "self.opt = optimizer_class(self.model.parameters(), lr=0.01)\n" in new
    assert "self.accelerator.prepare(" in new or "accelerator.prepare(" in new, new



# set Q's Q2 (a SimCLR pre-train/fine-tune cycle): a trainer whose base class's ``__init__`` keeps the model it is
# handed (``self.model = model.to(self.device)``), a subclass method building the optimizer and training on the loader
# a base method returns, and another class of the module (``SimCLR``) that the entry script never builds
TUNER_MODULE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader


class BaseModel:
    def __init__(self, model, batch_size=8):
        self.model = model.to(self.device)
        self.batch_size = batch_size

    @property
    def device(self):
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")

    def load_data(self, dataset):
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=True)


class FineTune(BaseModel):
    def fine_tune(self, dataloader, n_epochs=2):
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        for epoch in range(n_epochs):
            for x, y in dataloader:
                optimizer.zero_grad()
                loss = criterion(self.model(x.to(self.device)), y.to(self.device))
                loss.backward()
                optimizer.step()
            print(epoch, loss.item())
        return self.model


class SimCLR:
    def __init__(self, model):
        self.model = model

    def make_tuner(self, model):
        self.tuner = FineTune(model)

    def tune(self, data, epochs):
        dataloader = self.tuner.load_data(data)
        return self.tuner.fine_tune(dataloader, epochs)

    def full(self, data, n_cycles=2):
        for i in range(n_cycles):
            self.make_tuner(self.model)
            self.tune(data, 1)
"""

TUNER_SCRIPT = """import torch
from torch.utils.data import TensorDataset
from makers import FineTune


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    tuner = FineTune(torch.nn.Linear(4, 3))
    loader = tuner.load_data(data)
    tuner.fine_tune(loader)


if __name__ == "__main__":
    main()
"""


def test_a_model_kept_by_an_inherited_init_is_not_left_out_of_prepare() -> None:
    """The file was refused (ACC021) because ``fine_tune``'s loader parameter had a second caller in ``SimCLR.tune``,
    a method of a class nothing builds; that caller no longer decides (methods of a class nothing names never run).
    Behind it, ``FineTune(torch.nn.Linear(4, 3))`` runs the inherited ``BaseModel.__init__`` that keeps the model: not
    seen, the conversion prepared the optimizer and the loader only, each process training its own copy, silently.
    The model is followed through the inherited ``__init__`` now; no place holds it with the optimizer, so the file is
    refused, naming it (ACC014)."""
    result = convert_source(TUNER_SCRIPT, modules=[ModuleText("makers", "makers.py", TUNER_MODULE)])
    found = [(w.code, w.line) for r in (result, *result.companions) for w in r.warnings]
    assert result.status == "attention" and found == [("ACC014", 8)], (result.status, found)
    assert "`self.model`" in result.reason


def test_a_method_of_a_class_the_program_builds_still_decides() -> None:
    """Near miss: where the entry script builds ``SimCLR`` too, its ``tune`` runs, and its call still counts."""
    script = TUNER_SCRIPT.replace("from makers import FineTune", "from makers import FineTune, SimCLR").replace(
        "    tuner.fine_tune(loader)\n", "    tuner.fine_tune(loader)\n    SimCLR(torch.nn.Linear(4, 3)).full(data)\n")
    assert script != TUNER_SCRIPT
    result = convert_source(script, modules=[ModuleText("makers", "makers.py", TUNER_MODULE)])
    found = [(w.code, w.line) for r in (result, *result.companions) for w in r.warnings]
    assert result.status == "attention" and found == [("ACC021", 24)], (result.status, found)


# set Q's Q4 (a character-level LSTM): a helper module draws a random batch per step, keeps the losses and steps the
# script's ReduceLROnPlateau with their mean every ten steps
PLATEAU_SCRIPT = """import torch
import torch.nn as nn
from utils import train


def main():
    torch.manual_seed(0)
    data = (torch.randn(256, 4), torch.randn(256, 1))
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
    train(model, optimizer, nn.MSELoss(), data, scheduler)


if __name__ == "__main__":
    main()
"""

PLATEAU_HELPER = """import logging
import numpy as np
import torch


def train(model, optimizer, criterion, data, scheduler, epochs=60, batch_size=8):
    history = []
    for epoch in range(epochs):
        idx = np.random.randint(0, len(data[0]), batch_size)  # a random batch per step
        x, y = data[0][idx], data[1][idx]
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append(loss.item())
        if len(history) >= 10:
            avg_loss = np.mean(history)
            scheduler.step(avg_loss)
            history = []
    w = sum(p.detach().sum().item() for p in model.parameters())
    logging.warning("lr %s weights %.6f", optimizer.param_groups[0]["lr"], w)
"""


def test_a_plateau_scheduler_stepped_with_a_per_process_average_reads_the_mean_over_processes() -> None:
    """Each process stepped the scheduler with its own average, so each lowered its learning rate at its own time;
    launched, the runtime's sentinel stopped it (``ParametersDifferError``), and without it the models drift apart,
    with no warning. The value is reduced where the scheduler reads it."""
    result = convert_source(PLATEAU_SCRIPT, modules=[ModuleText("utils", "utils.py", PLATEAU_HELPER)])
    helper = result.companions[0].new
    assert ('scheduler.step(accelerator.reduce(torch.tensor(avg_loss, dtype=torch.float64, device=accelerator.device), '
            '"mean").item())') in helper, helper


# set Q's Q5 (tabular regression): the data preparation and a NumPy baseline print at the top level; the accelerator
# is made further down, where the torch model is built (inside a ``try:``)
LATE_ACCELERATOR = """import numpy as np
import torch
import torch.nn as nn
from helper import NumpyNet

print("PART 1: data")
x = np.random.default_rng(0).normal(size=(64, 3)).astype("float32")
y = x.sum(1, keepdims=True)
print("PART 2: numpy baseline", NumpyNet().fit(x, y).w.ravel().round(3))

try:
    import torch.optim as optim
    net = nn.Linear(3, 1)
    optimizer = optim.Adam(net.parameters(), lr=0.01)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for epoch in range(20):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(xt), yt)
        loss.backward()
        optimizer.step()
    print("PART 3: torch loss", round(loss.item(), 4))
except ImportError:
    print("no torch")
print("done")
"""

NUMPY_HELPER = """import numpy as np


class NumpyNet:  # a model of the program's own, no torch
    def fit(self, x, y):
        self.w = np.linalg.lstsq(x, y, rcond=None)[0]
        return self
"""


def test_prints_before_a_late_accelerator_are_printed_once() -> None:
    """Every print before the accelerator (about 120 lines in Q5) came out once per process. They go through
    ``PartialState(cpu=True).print``, the state the accelerator is then made on; those after it through the
    accelerator."""
    new = convert_source(LATE_ACCELERATOR, modules=[ModuleText("helper", "helper.py", NUMPY_HELPER)]).new
    assert 'PartialState(cpu=True).print("PART 1: data")' in new and "PartialState(cpu=True).print(\"PART 2:" in new, new
    assert '    accelerator.print("PART 3: torch loss", round(loss.item(), 4))' in new, new


def test_a_method_the_script_calls_before_a_late_accelerator_prints_once() -> None:
    """Q5's NumPy network prints its epochs from its own ``fit``, called at the top level above the statement that
    makes the accelerator: its prints go through ``PartialState(cpu=True).print`` too."""
    helper = NUMPY_HELPER.replace("        return self\n", "        print('fitted', self.w.shape)\n        return self\n")
    result = convert_source(LATE_ACCELERATOR, modules=[ModuleText("helper", "helper.py", helper)])
    module = result.companions[0].new
    assert "        PartialState(cpu=True).print('fitted', self.w.shape)\n" in module, module
    assert "from accelify.runtime import PartialState\n" in module, module


def test_a_method_called_on_a_name_bound_twice_to_an_imported_class_is_followed() -> None:
    """Q5 binds its NumPy network to ``nn`` (``nn = NeuralNet(...)``), the name ``import torch.nn as nn`` also binds;
    the class is imported from the program's own module. ``nn.fit(...)`` is ``NeuralNet.fit``: its prints go once."""
    helper = NUMPY_HELPER.replace("        return self\n", "        print('fitted', self.w.shape)\n        return self\n")
    script = LATE_ACCELERATOR.replace('print("PART 2: numpy baseline", NumpyNet().fit(x, y).w.ravel().round(3))',
                                      'nn = NumpyNet()\nnn.fit(x, y)\nimport torch.nn as nn')
    assert script != LATE_ACCELERATOR
    result = convert_source(script, modules=[ModuleText("helper", "helper.py", helper)])
    assert "        PartialState(cpu=True).print('fitted', self.w.shape)\n" in result.companions[0].new


def test_a_class_whose_name_only_its_own_methods_read_never_runs() -> None:
    """Q1's ``dataset.py`` holds a ``Yelp`` data set nothing builds; its ``__init__`` reads its own name
    (``super(Yelp, self).__init__()``) and makes a folder with ``os.mkdir`` (ACC018). That read builds nothing: the
    method never runs, and its warning is not given; the same class built by the script is still reported."""
    module = TUNER_MODULE + '''

class Yelp(BaseModel):
    def __init__(self, model, cache_dir):
        super(Yelp, self).__init__(model)
        import os
        os.mkdir(cache_dir)
'''
    result = convert_source(TUNER_SCRIPT, modules=[ModuleText("makers", "makers.py", module)])
    assert not any(w.code == "ACC018" for r in (result, *result.companions) for w in r.warnings)
    built = TUNER_SCRIPT.replace("from makers import FineTune", "from makers import FineTune, Yelp").replace(
        "    tuner.fine_tune(loader)\n", "    tuner.fine_tune(loader)\n    Yelp(torch.nn.Linear(4, 3), 'cache')\n")
    result = convert_source(built, modules=[ModuleText("makers", "makers.py", module)])
    assert any(w.code == "ACC018" for r in (result, *result.companions) for w in r.warnings)
