"""Shapes of the programs the lead tried this stop (set S, thirteenth stop; docs/FIELD_TESTS.md names them)."""

from __future__ import annotations

from _convert import codes, converted

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

