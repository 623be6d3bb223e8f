"""A trainer class that takes its objects through ``**kwargs`` (field-test set I, I10: SimCLR's trainer): what
``self.x = kwargs["x"]`` (``.get``, ``.pop``) holds is what the constructions pass as ``x=``, for every question
asked of it (a per-epoch scheduler stays out of prepare, a saved model is unwrapped), as with a named parameter.
A key that cannot be read (computed, a dict the method writes, kwargs handed on) gets no guess: today's answer.
The corpus cases ``trainer_kwargs_scheduler`` and ``trainer_kwargs_checkpoint`` are the goldens."""

from __future__ import annotations

import pytest

from accelify.pipeline import convert_source
from accelify.program import ModuleText

MAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import Trainer
def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
    {call}
if __name__ == "__main__":
    main()
"""

TRAINER = """\
import torch
class {base}:
    def __init__(self, {params}):
        {init}
    def train(self, loader, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
            self.scheduler.step()
        torch.save({{"state_dict": self.model.state_dict()}}, "ckpt.pt")
"""

CALL = "Trainer(model=model, optimizer=opt, scheduler=sched).train(loader, 4)"
STORED = "self.model = {m}\n        self.optimizer = {o}\n        self.scheduler = {s}"


def _convert(init: str, call: str = CALL, params: str = "*args, **kwargs", extra: str = "") -> tuple[str, str]:
    """The entry script's and the trainer module's conversion."""
    trainer = TRAINER.format(base="Base" if extra else "Trainer", params=params, init=init) + extra
    result = convert_source(MAIN.format(call=call), path="main.py", modules=[ModuleText("trainer", "trainer.py", trainer)])
    assert result.error is None, result.error
    return result.new, next(c.new for c in result.companions if c.path == "trainer.py")


UNWRAPPED = 'self.accelerator.save({"state_dict": self.accelerator.unwrap_model(self.model).state_dict()}, "ckpt.pt")'
NAMED = _convert(STORED.format(m="model", o="optimizer", s="scheduler"), params="model, optimizer, scheduler")


def test_named_parameters_are_the_reference() -> None:
    main, trainer = NAMED
    assert "model, opt, loader = accelerator.prepare(model, opt, loader)" in main
    assert UNWRAPPED in trainer


@pytest.mark.parametrize("init", [
    STORED.format(m='kwargs["model"]', o='kwargs["optimizer"]', s='kwargs["scheduler"]'),
    STORED.format(m='kwargs.get("model")', o='kwargs.get("optimizer", None)', s='kwargs.get("scheduler", None)'),
    STORED.format(m='kwargs.pop("model")', o='kwargs.pop("optimizer", None)', s='kwargs.pop("scheduler")'),
    'model = kwargs["model"]\n        ' + STORED.format(m="model", o='kwargs["optimizer"]', s='kwargs["scheduler"]'),
], ids=["subscript", "get", "pop", "through a local"])
def test_a_key_of_kwargs_is_the_keyword_argument_passed(init: str) -> None:
    main, trainer = _convert(init)
    assert main == NAMED[0]  # the per-epoch StepLR stays out of prepare
    assert UNWRAPPED in trainer


def test_a_keyword_of_a_dict_call_spread_into_the_construction_counts_too() -> None:
    main, trainer = _convert(STORED.format(m='kwargs["model"]', o='kwargs["optimizer"]', s='kwargs["scheduler"]'),
                             call="Trainer(**dict(model=model, optimizer=opt, scheduler=sched)).train(loader, 4)")
    assert "model, opt, loader = accelerator.prepare(model, opt, loader)" in main
    assert "accelerator.unwrap_model(self.model).state_dict()" in trainer


WITHOUT_ANSWER = "model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)"


@pytest.mark.parametrize("init, call, extra", [
    ('key = "scheduler"\n        ' + STORED.format(m='kwargs["model"]', o='kwargs["optimizer"]', s="kwargs[key]"), CALL, ""),
    ('kwargs["scheduler"] = kwargs["scheduler"]\n        '
     + STORED.format(m='kwargs["model"]', o='kwargs["optimizer"]', s='kwargs["scheduler"]'), CALL, ""),
    (STORED.format(m='kwargs["model"]', o='kwargs["optimizer"]', s='kwargs["scheduler"]'),
     "Trainer(**{'model': model, 'optimizer': opt, 'scheduler': sched}).train(loader, 4)", ""),
    (STORED.format(m='kwargs["model"]', o='kwargs["optimizer"]', s='kwargs["scheduler"]'), CALL,
     "class Trainer(Base):\n    def __init__(self, **kwargs):\n        super().__init__(**kwargs)\n"),  # (no guess yet)
], ids=["computed key", "written dict", "dict literal", "handed on to the base class"])
def test_a_key_that_cannot_be_read_gets_no_guess(init: str, call: str, extra: str) -> None:
    main, _ = _convert(init, call=call, extra=extra)
    assert WITHOUT_ANSWER in main
