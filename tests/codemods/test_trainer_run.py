"""A trainer class whose ``run()`` builds the optimizer and the loader (minGPT's layout: karpathy/minGPT @37baab7
``mingpt/trainer.py``, run by ``projects/chargpt/chargpt.py`` and ``projects/adder/adder.py``; the shape's folder is
``trainer_run_builds_opt_loader``), as one source: the model class with ``configure_optimizers``, the trainer, the
entry with its callback."""

from __future__ import annotations

from _convert import codes, converted

MINGPT = """\
from collections import defaultdict

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x, y=None):
        out = self.fc(x)
        return out, (None if y is None else nn.functional.mse_loss(out, y))

    def generate(self, x):
        return self.fc(x)

    def configure_optimizers(self, config):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        optim_groups = [{"params": [param_dict[pn] for pn in sorted(param_dict)], "weight_decay": 0.1}]
        optimizer = torch.optim.AdamW(optim_groups, lr=config["lr"])
        return optimizer


class Trainer:
    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.optimizer = None
        self.train_dataset = train_dataset
        self.callbacks = defaultdict(list)
        self.device = 'cuda' if torch.cuda.is_available() else 'cpu'
        self.model = self.model.to(self.device)

    def set_callback(self, onevent, callback):
        self.callbacks[onevent] = [callback]

    def trigger_callbacks(self, onevent):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, config = self.model, self.config
        self.optimizer = model.configure_optimizers(config)
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True, num_samples=int(1e10)),
            batch_size=config["batch_size"],
        )
        model.train()
        self.iter_num = 0
        data_iter = iter(train_loader)
        while True:
            try:
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(train_loader)
                batch = next(data_iter)
            x, y = [t.to(self.device) for t in batch]
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            self.optimizer.step()
            self.trigger_callbacks('on_batch_end')
            self.iter_num += 1
            if self.iter_num >= config["max_iters"]:
                break


if __name__ == '__main__':
    torch.manual_seed(0)
    train_dataset = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    model = GPT()
    trainer = Trainer({"lr": 1e-3, "batch_size": 8, "max_iters": 30}, model, train_dataset)

    def evaluate(trainer):
        model.eval()
        with torch.no_grad():
            out = model.generate(torch.ones(1, 4))
        print(f"sample {out.item():.3f}")
        model.train()

    def batch_end_callback(trainer):
        if trainer.iter_num % 10 == 0:
            print(f"iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}")
            evaluate(trainer)
            torch.save(model.state_dict(), "model.pt")

    trainer.set_callback('on_batch_end', batch_end_callback)
    trainer.run()
"""

PREPARE = ("        model, self.optimizer, train_loader = self.accelerator.prepare(\n"
           "            model, self.optimizer, train_loader\n        )\n")


def test_a_trainer_run_that_builds_the_optimizer_and_the_loader_prepares_them_there() -> None:
    """A17 / C adder (minGPT): ``run()`` builds ``self.optimizer = model.configure_optimizers(config)`` (a method of
    the model: ``optimizer = AdamW(optim_groups)`` then ``return optimizer``) and an endless loader. It was refused:
    the optimizer was taken for the model's own (``configure_optimizers`` the place to prepare, ACC026 in one file;
    ACC009 `run` and ACC011 `self.device` across minGPT's package). Now the accelerator is made first in
    ``__init__``, where ``self.device`` is chosen; the model ``run`` holds as ``model``, its optimizer and its loader
    are prepared in ``run`` right after the loader; the backward and the clipping go through the accelerator."""
    new = converted(MINGPT)
    assert codes(MINGPT) == []
    assert ("    def __init__(self, config, model, train_dataset):\n        self.accelerator = Accelerator()\n"
            "        self.config = config\n") in new
    assert "        self.device = self.accelerator.device\n" in new
    assert "self.model.to(" not in new
    assert ("            batch_size=config[\"batch_size\"],\n        )\n" + PREPARE + "        model.train()\n") in new
    assert "            self.accelerator.backward(self.loss)\n" in new
    assert "            self.accelerator.clip_grad_norm_(model.parameters(), 1.0)\n" in new
    # the model's own method is left alone: its optimizer is the one ``run`` binds
    assert "        optimizer = torch.optim.AdamW(optim_groups, lr=config[\"lr\"])\n        return optimizer\n" in new
    assert new.count(".prepare(") == 1


def test_the_callbacks_the_trainer_calls_with_itself_print_and_save_through_its_accelerator() -> None:
    """The entry's ``batch_end_callback(trainer)``, handed to ``trainer.set_callback`` and called by the trainer as
    ``callback(self)``: it printed and saved on every process (ACC009 for the save). It reads the accelerator as
    ``trainer.accelerator``, and so does ``evaluate(trainer)``, which only the callback calls, with its trainer. The
    entry's ``model`` is the bare module (prepare wrapped ``run``'s name for it): its ``generate`` and its
    ``state_dict()`` are the unwrapped model's, as they were."""
    new = converted(MINGPT)
    assert "            trainer.accelerator.print(f\"iter {trainer.iter_num}: train loss {trainer.loss.item():.5f}\")\n" in new
    assert "        trainer.accelerator.print(f\"sample {out.item():.3f}\")\n" in new
    assert "            trainer.accelerator.save(model.state_dict(), \"model.pt\")\n" in new
    assert "            out = model.generate(torch.ones(1, 4))\n" in new


def test_a_configure_optimizers_that_returns_the_optimizer_directly_converts_alike() -> None:
    """``return torch.optim.AdamW(self.parameters(), ...)`` (no groups variable): it was ACC012 "no optimizer was
    found", the call ``model.configure_optimizers(config)`` on ``run``'s alias of ``self.model`` not followed."""
    code = MINGPT.replace(
        "        param_dict = {pn: p for pn, p in self.named_parameters()}\n"
        "        optim_groups = [{\"params\": [param_dict[pn] for pn in sorted(param_dict)], \"weight_decay\": 0.1}]\n"
        "        optimizer = torch.optim.AdamW(optim_groups, lr=config[\"lr\"])\n        return optimizer\n",
        "        return torch.optim.AdamW(self.parameters(), lr=config[\"lr\"])\n")
    assert "optim_groups" not in code
    new = converted(code)
    assert PREPARE in new and "self.accelerator.backward(self.loss)" in new
    assert codes(code) == []


def test_a_loop_that_runs_self_model_gets_the_prepared_model_there_too() -> None:
    """``logits, self.loss = self.model(x, y)`` after ``model, config = self.model, self.config``: prepare wraps
    ``model``; ``self.model`` still held the bare module, and the loop would have trained it without DDP (each
    process its own copy). It is bound to the prepared model right after prepare."""
    code = MINGPT.replace("            logits, self.loss = model(x, y)\n", "            logits, self.loss = self.model(x, y)\n")
    new = converted(code)
    assert PREPARE + "        self.model = model\n" in new


def test_a_run_that_builds_only_the_loader_prepares_there_with_what_init_built() -> None:
    """The optimizer built in ``__init__`` (``self.optimizer = torch.optim.AdamW(self.model.parameters())``), the
    endless loader in ``run``: ``__init__`` held the model and the optimizer, so prepare went there and the loader,
    which no ``for`` walks, was left out (every process walked all of it). ``run``, called once, holds all three:
    prepare goes after its loader, under ``run``'s own name for the model."""
    code = MINGPT.replace("        self.optimizer = None\n",
                          "        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config[\"lr\"])\n")
    code = code.replace("        self.optimizer = model.configure_optimizers(config)\n", "")
    code = code[:code.index("    def configure_optimizers")] + code[code.index("class Trainer:"):]
    new = converted(code)
    assert PREPARE in new and new.count(".prepare(") == 1
    assert "        self.accelerator = Accelerator()\n        self.config = config\n" in new
    assert codes(code) == []


def test_a_method_run_once_per_epoch_that_builds_the_optimizer_stays_refused() -> None:
    """``run_epoch()`` builds the optimizer and the loader and is called in ``for epoch in range(3):``: prepare there
    would wrap the model again at every call (ACC045 names the method and the loop)."""
    code = MINGPT.replace("    def run(self):\n", "    def run_epoch(self):\n").replace(
        "    trainer.run()\n", "    for epoch in range(3):\n        trainer.run_epoch()\n")
    assert codes(code) == ["ACC045:44"]
    assert converted(code) == code


def test_an_optimizer_a_trainer_method_returns_is_not_taken_for_the_model_s() -> None:
    """Only a method of a ``torch.nn`` class stands for the model it is called on: a trainer's own
    ``build_optimizer(self)`` returning ``opt`` over ``self.model.parameters()`` is followed as before (its optimizer
    trains ``self.model``, all three prepared in ``__init__``, where the loop's ``for`` loader is)."""
    code = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = self.build_optimizer()

    def build_optimizer(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        return opt

    def fit(self):
        for x, y in self.loader:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
Trainer(model, loader).fit()
"""
    new = converted(code)
    assert "        self.model, self.optimizer, self.loader = self.accelerator.prepare(\n" in new
    assert "            self.accelerator.backward(loss)\n" in new and new.count(".prepare(") == 1
    assert "        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)\n        return opt\n" in new



BUILT_IN_THE_CALL = """import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader):
        self.model = model
        self.loader = loader
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def fit(self):
        for epoch in range(2):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                loss.backward()
                self.optimizer.step()
            print(epoch, loss.item())


if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(64, 2), torch.randn(64, 1)), batch_size=8)
    Trainer(torch.nn.Linear(2, 1), loader).fit()
"""


def test_a_model_built_in_the_trainers_construction_call_is_prepared() -> None:
    """``Trainer(torch.nn.Linear(2, 1), loader).fit()``: the model, built in the call and bound nowhere, was found
    nowhere; only the optimizer and the loader were prepared, and every process trained its own copy, silently (found
    by the helper of this stop's trainer work). The binding that keeps it (``self.model = model``) is the model."""
    new = converted(BUILT_IN_THE_CALL)
    assert "        self.model, self.optimizer, self.loader = self.accelerator.prepare(\n" in new, new


def test_a_model_handed_by_name_is_followed_as_before() -> None:
    """Near miss: built first and handed by name, the model is followed to where it is built, as before."""
    source = BUILT_IN_THE_CALL.replace("    Trainer(torch.nn.Linear(2, 1), loader).fit()\n",
                                       "    net = torch.nn.Linear(2, 1)\n    Trainer(net, loader).fit()\n")
    new = converted(source)
    assert "self.model" in new and "accelerator.prepare(" in new
