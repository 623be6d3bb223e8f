"""Shapes found in field-test set M (docs/FIELD_TESTS.md): each the minimal program of its class, and what a right
conversion of it does."""

from __future__ import annotations

from _convert import codes, converted

TRAIN_FOR_TWO_MODELS = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, data, epochs=2):
    loader = DataLoader(data, batch_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
small = train(torch.nn.Linear(4, 1), data)
big = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
big = train(big, data)
"""


def test_a_training_function_called_for_two_models_prepares_the_model_it_is_handed() -> None:
    """M3: a notebook's ``train(model, data)`` builds its own loader and optimizer and is called for a flow, then a
    RealNVP: only the optimizer and the loader were prepared, and each process trained its own copy."""
    new = converted(TRAIN_FOR_TWO_MODELS)
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in new
    assert codes(TRAIN_FOR_TWO_MODELS) == []


def test_an_evaluation_function_called_for_two_models_is_not_a_place_to_prepare_them() -> None:
    """The same call shape without an optimizer of the function's own: the models are prepared where they train."""
    code = TRAIN_FOR_TWO_MODELS.replace(
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", "").replace("            optimizer.step()\n", "")
    assert "accelerator.prepare(model" not in converted(code)
