"""Writes and device choices in code the accelerator does not reach (a model's own methods, a helper of another module
not handed the accelerator): kept to the main process, and the model's device made the process's, through the
runtime's process state (``PartialState``), instead of being reported (ACC009, ACC048, ACC011, ACC002). The field
programs: O18 (a helper writes the validation predictions as images), N4 (a model picks its own device and pickles
itself in its ``save`` method), shapes in ``pstate_writes``."""

from __future__ import annotations

from accelify.pipeline import Result, convert_source
from accelify.program import ModuleText
from _convert import converted, dedent

# O18's train.py + utils.py shape: the helper runs the prepared model over the unprepared validation loader and
# writes two images per batch, so its calls reach the other processes and cannot be kept to the main process
HELPER_TRAIN = """\
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from utils import save_predictions_as_images


def main():
    os.makedirs("saved_images", exist_ok=True)
    train_loader = DataLoader(TensorDataset(torch.randn(32, 1, 8, 8), torch.rand(32, 1, 8, 8)), batch_size=4, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.randn(8, 1, 8, 8), torch.rand(8, 1, 8, 8)), batch_size=4)
    model = nn.Conv2d(1, 1, 3, padding=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for x, y in train_loader:
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        save_predictions_as_images(val_loader, model, folder="saved_images")


if __name__ == "__main__":
    main()
"""

HELPER_UTILS = """\
import torch
import torchvision


def save_predictions_as_images(loader, model, folder="saved_images/"):
    model.eval()
    for idx, (x, y) in enumerate(loader):
        with torch.no_grad():
            preds = (torch.sigmoid(model(x)) > 0.5).float()
        # the prediction, then the target
        torchvision.utils.save_image(preds, f"{folder}/pred_{idx}.png")
        torchvision.utils.save_image(y, f"{folder}/{idx}.png")
    model.train()
"""

# N4's train_model.py + model.py shape: the model is handed to ``train``, so ``net.save(path)`` cannot be followed
# to its class, and the model chooses its own device
MODEL_TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

from model import Parser


def train(net, train_loader, path, epochs):
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    device = net.device
    best = float("inf")
    for epoch in range(epochs):
        total = 0.0
        for words, gold in train_loader:
            loss = torch.nn.functional.mse_loss(net(words), gold.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / len(train_loader):.4f}")
        if total < best:
            best = total
            net.save(path)


if __name__ == "__main__":
    ds = TensorDataset(torch.randint(0, 20, (64, 5)), torch.randn(64, 5))
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    for i in range(2):
        net = Parser(20)
        train(net, loader, f"model_{i}.pt", 2)
"""

MODEL = """\
import torch
from torch import nn


class Parser(nn.Module):
    def __init__(self, n_words):
        super().__init__()
        self.use_coda = torch.cuda.is_available()
        self.device = torch.device("cuda:0" if self.use_coda else "cpu")
        self.emb = nn.Embedding(n_words, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, words):
        return self.out(self.emb(words.to(self.device))).squeeze(-1)

    def save(self, path):
        torch.save(self, path)  # the whole module, pickled
"""


def _convert(script: str, target: str = "accelify", **modules: str) -> Result:
    return convert_source(dedent(script), target=target, modules=[ModuleText(unit, f"{unit}.py", dedent(text))
                                                                  for unit, text in modules.items()])


def _companion(result: Result, path: str) -> str:
    return next(c.new for c in result.companions if c.path == path)


def _warnings(result: Result) -> list[str]:
    return [f"{w.code}:{w.line}" for w in result.warnings] + [
        f"{c.path}:{w.code}:{w.line}" for c in result.companions for w in c.warnings]


def _again(result: Result, **modules: str) -> Result:
    """The conversion converted again, its modules as the first conversion wrote them."""
    written = {c.path: c.new for c in result.companions}
    return convert_source(result.new, modules=[ModuleText(unit, f"{unit}.py", written.get(f"{unit}.py", dedent(text)))
                                               for unit, text in modules.items()])


# --- the shapes that convert -------------------------------------------------------------------------------------

def test_a_helper_that_runs_the_model_writes_its_images_on_the_main_process() -> None:
    """O18: each write in the helper runs under ``PartialState().is_main_process`` (the model still runs on every
    process, as before: its forward may reach the others), with the import; no ACC048."""
    result = _convert(HELPER_TRAIN, utils=HELPER_UTILS)
    assert _warnings(result) == []
    utils = _companion(result, "utils.py")
    assert "import torchvision\nfrom accelify.runtime import PartialState\n" in utils
    assert ("        # the prediction, then the target\n"
            "        if PartialState().is_main_process:\n"
            "            torchvision.utils.save_image(preds, f\"{folder}/pred_{idx}.png\")\n"
            "        if PartialState().is_main_process:\n"
            "            torchvision.utils.save_image(y, f\"{folder}/{idx}.png\")\n") in utils
    assert "            preds = (torch.sigmoid(model(x)) > 0.5).float()\n" in utils  # not gated
    assert "        save_predictions_as_images(val_loader, model, folder=\"saved_images\")\n" in result.new
    again = _again(result, utils=HELPER_UTILS)
    assert again.status == "unchanged" and not again.companions


def test_a_model_that_saves_itself_and_chooses_its_device_goes_through_the_process_state() -> None:
    """N4: ``self.device = PartialState().device`` (the accelerator's device), ``torch.save(self, path)`` on the
    main process only (a prepared model's method runs on the module it wraps: ``self`` is the unwrapped model), and
    ``.to(device)`` of ``device = net.device`` is no unknown device any more. No ACC011, ACC009 or ACC002."""
    result = _convert(MODEL_TRAIN, model=MODEL)
    assert _warnings(result) == []
    model = _companion(result, "model.py")
    assert "from torch import nn\nfrom accelify.runtime import PartialState\n" in model
    assert "        self.device = PartialState().device\n" in model
    assert ("    def save(self, path):\n"
            "        if PartialState().is_main_process:\n"
            "            torch.save(self, path)  # the whole module, pickled\n") in model
    assert model.count("import PartialState") == 1
    assert "            net.save(path)\n" in result.new
    again = _again(result, model=MODEL)
    assert again.status == "unchanged" and not again.companions and _warnings(again) == []


def test_with_target_accelerate_the_state_is_hugging_faces() -> None:
    """``--target accelerate``: ``PartialState`` comes from Hugging Face Accelerate, and the method is reached through
    the unwrapped model (a DistributedDataParallel wrapper there does not forward ``save`` or ``device``)."""
    result = _convert(MODEL_TRAIN, target="accelerate", model=MODEL)
    assert _warnings(result) == []
    model = _companion(result, "model.py")
    assert "from accelerate import PartialState\n" in model and "        self.device = PartialState().device\n" in model
    assert "            accelerator.unwrap_model(net).save(path)\n" in result.new
    assert "    device = accelerator.unwrap_model(net).device\n" in result.new


def test_a_cpu_accelerator_makes_the_state_as_it_is_made() -> None:
    """``Accelerator(cpu=True)``, and a save whose calls cannot be followed (it may run before the accelerator
    exists): the state is made as the accelerator is (Hugging Face Accelerate keeps the first state's device)."""
    model = MODEL.replace('        self.use_coda = torch.cuda.is_available()\n'
                          '        self.device = torch.device("cuda:0" if self.use_coda else "cpu")\n', "")
    script = MODEL_TRAIN.replace("    device = net.device\n", "").replace("gold.to(device)", "gold")
    result = _convert(script.replace("words.to(self.device)", "words"), model=model.replace("words.to(self.device)", "words"))
    assert _warnings(result) == []
    assert "Accelerator(cpu=True)" in result.new
    assert ("        if PartialState(cpu=True).is_main_process:\n"
            "            torch.save(self, path)  # the whole module, pickled\n") in _companion(result, "model.py")


def test_a_save_read_back_in_its_function_waits_for_the_main_process() -> None:
    """The file written on the main process is read back further down the same method: every process waits for it
    (``PartialState().wait_for_everyone()`` before the read, outside the guard)."""
    model = MODEL.replace(
        "        torch.save(self, path)  # the whole module, pickled\n",
        "        torch.save(self.state_dict(), path)\n        self.load_state_dict(torch.load(path))\n")
    result = _convert(MODEL_TRAIN, model=model)
    assert _warnings(result) == []
    assert ("        if PartialState().is_main_process:\n"
            "            torch.save(self.state_dict(), path)\n"
            "        PartialState().wait_for_everyone()\n"
            "        self.load_state_dict(torch.load(path))\n") in _companion(result, "model.py")


# --- near misses -------------------------------------------------------------------------------------------------

def test_a_model_method_called_where_the_accelerator_is_keeps_the_save_at_its_call() -> None:
    """The accelerator reaches the call (``model = Net()`` in the function that trains): as before, the call runs on
    the main process after a barrier, through the unwrapped model; the method itself is not touched."""
    script = """\
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from model import Parser

    def main():
        net = Parser(20)
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        loader = DataLoader(TensorDataset(torch.randint(0, 20, (64, 5)), torch.randn(64, 5)), batch_size=8)
        for words, gold in loader:
            loss = torch.nn.functional.mse_loss(net(words), gold)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        net.save("net.pt")

    main()
    """
    result = _convert(script, model=MODEL)
    assert ("    accelerator.wait_for_everyone()\n    if accelerator.is_main_process:\n"
            "        accelerator.unwrap_model(net).save(\"net.pt\")\n") in result.new
    assert "is_main_process" not in _companion(result, "model.py")


def test_a_save_in_a_function_nothing_calls_is_neither_changed_nor_reported() -> None:
    utils = HELPER_UTILS + '\n\ndef dump(model, path):\n    torch.save(model.state_dict(), path)\n'
    result = _convert(HELPER_TRAIN, utils=utils)
    assert _warnings(result) == []
    assert "    torch.save(model.state_dict(), path)\n" in _companion(result, "utils.py")
    assert "PartialState().is_main_process:\n        torch.save" not in _companion(result, "utils.py")


def test_a_helper_that_returns_its_values_writes_nothing() -> None:
    """Only true writes: a helper that returns the predictions (no file) is left as it is."""
    utils = HELPER_UTILS.replace('        torchvision.utils.save_image(preds, f"{folder}/pred_{idx}.png")\n'
                                 '        torchvision.utils.save_image(y, f"{folder}/{idx}.png")\n',
                                 "        last = preds\n").replace("    model.train()\n", "    model.train()\n    return last\n")
    result = _convert(HELPER_TRAIN, utils=utils)
    assert _warnings(result) == []
    assert all("PartialState" not in c.new for c in result.companions)


def test_an_accelerator_whose_cpu_the_model_cannot_read_leaves_the_save_reported() -> None:
    """``Accelerator(cpu=not args.cuda)``: the model is built after it exists, so its device is the shared state's
    (``PartialState()``); its save, whose calls cannot be followed, cannot make the state as the accelerator is, so
    it stays as it is, reported (ACC009)."""
    script = MODEL_TRAIN.replace("import torch\n", "import argparse\nimport torch\n", 1).replace(
        "    ds = TensorDataset", '    parser = argparse.ArgumentParser()\n    parser.add_argument("--cuda", action="store_true")\n'
        '    args = parser.parse_args()\n    device = torch.device("cuda" if args.cuda else "cpu")\n    ds = TensorDataset').replace(
        "net = Parser(20)", "net = Parser(20).to(device)")
    result = _convert(script, model=MODEL)
    assert "    accelerator = Accelerator(cpu=not args.cuda)\n" in result.new
    assert _warnings(result) == ["model.py:ACC009:17"]
    model = _companion(result, "model.py")
    assert "        self.device = PartialState().device\n" in model
    assert "    def save(self, path):\n        torch.save(self, path)" in model


# F10's shape: the device comes from a helper in the ``__main__`` block and is handed to a trainer class that makes the
# accelerator in its ``__init__``, and to the methods that use it (here to draw noise on it)
DEVICE_HANDED_TO_A_TRAINER = """import torch
from torch.utils.data import DataLoader, TensorDataset


def get_device():
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class Trainer:
    def __init__(self, lr, device):
        self.model = torch.nn.Linear(4, 1).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)

    def train_all_batches(self, loader, device):
        total = 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            self.optimizer.zero_grad()
            noise = 0.01 * torch.randn(y.shape, device=device)
            loss = torch.nn.functional.mse_loss(self.model(x), y + noise)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
        return total / len(loader)

    def fit(self, dataset, epochs, device):
        loader = DataLoader(dataset, batch_size=8, shuffle=True)
        for epoch in range(epochs):
            print(epoch, self.train_all_batches(loader, device))


if __name__ == "__main__":
    device = get_device()
    trainer = Trainer(lr=0.1, device=device)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer.fit(data, 2, device)
"""


def test_a_device_where_the_accelerator_is_not_at_hand_is_the_process_states() -> None:
    """F10 (a recommender's ``Trainer``): ``device = get_device()`` in the ``__main__`` block, ``cuda:0`` on every
    process on a GPU machine, reported (ACC011). It is the process state's device now, the accelerator's; the import
    goes beside the accelerator's, with no blank lines between them."""
    result = convert_source(DEVICE_HANDED_TO_A_TRAINER)
    assert [w.code for w in result.warnings] == []
    assert '    device = PartialState().device\n    trainer = Trainer(lr=0.1, device=device)' in result.new
    assert "from accelify.runtime import Accelerator\nfrom accelify.runtime import PartialState\n\n\ndef get_device" in result.new


def test_a_device_assigned_twice_where_the_accelerator_is_not_at_hand_is_still_reported() -> None:
    """Near miss: a name the block assigns again cannot be tied at one assignment."""
    source = DEVICE_HANDED_TO_A_TRAINER.replace("    device = get_device()\n", "    device = get_device()\n    device = get_device()\n")
    assert [w.code for w in convert_source(source).warnings] == ["ACC011", "ACC011"]


CPU_DEVICE_NAMED_DEV = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
DEV = torch.device("cpu")
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(4, 1).to(DEV)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    x, y = x.to(DEV), y.to(DEV)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


def test_a_cpu_device_the_model_is_placed_on_is_the_training_device() -> None:
    """N13 (a seq2seq notebook): ``DEV = torch.device("cpu")``, the model placed on it. Left as it was under
    ``Accelerator()``, the prepared loader's batches went back to the CPU while ``prepare`` put the model on the GPU,
    with no warning (the name is not ``device``). It is the training device: ``accelerator.device``, its placements
    gone."""
    new = converted(CPU_DEVICE_NAMED_DEV)
    assert "DEV" not in new and "accelerator = Accelerator()\n" in new, new
    assert convert_source(CPU_DEVICE_NAMED_DEV).warnings == ()


def test_a_cpu_device_that_places_no_model_is_left() -> None:
    """Near miss: ``cpu = torch.device("cpu")`` for ``.to(cpu).numpy()`` is where values must go, not a device choice."""
    source = CPU_DEVICE_NAMED_DEV.replace('DEV = torch.device("cpu")', 'cpu = torch.device("cpu")').replace(
        "model = torch.nn.Linear(4, 1).to(DEV)", "model = torch.nn.Linear(4, 1)").replace(
        "    optimizer.step()\n", "    optimizer.step()\n    print(model(x).to(cpu).detach().numpy().sum())\n")
    assert ".to(cpu)" in converted(source)


HELPER_PRINTS_A_DRAWN_SAMPLE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def load_dataloaders(n):
    x = torch.randn(n, 4)
    y = (x.sum(1) > 0).long()
    print("samples:", n)
    return DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True), DataLoader(TensorDataset(x, y), batch_size=8)


def test_single_example(model, test_loader):
    model.eval()
    X, y = next(iter(test_loader))
    with torch.no_grad():
        preds = model(X).argmax(dim=1)
    print("True label:", y[0].item())
    print("Pred label:", preds[0].item())


def main():
    train_loader, test_loader = load_dataloaders(64)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        model.train()
        for X, y in train_loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(X), y).backward()
            optimizer.step()
        test_single_example(model, test_loader)


if __name__ == "__main__":
    main()
"""


def test_a_helper_called_once_the_accelerator_exists_prints_once_and_a_drawn_batch_needs_no_cpu_pin() -> None:
    """S1 (a sign-language CNN, thirteenth stop): ``test_single_example(model, test_loader)`` draws
    ``X, y = next(iter(test_loader))`` and prints a label; ``load_dataloaders`` prints a count. Neither helper gets
    the accelerator, so each process printed every line; and the forward on the drawn batch, outside a loop over the
    loader, pinned the accelerator to the CPU (``Accelerator(cpu=True)``) though the runtime places that batch. The
    prints go through ``PartialState().print``, and the accelerator is ``Accelerator()``."""
    new = converted(HELPER_PRINTS_A_DRAWN_SAMPLE)
    assert "accelerator = Accelerator()\n" in new, new
    assert new.count("PartialState().print(") == 3 and "    print(" not in new, new
