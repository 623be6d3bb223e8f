"""Accumulation is rewritten only on its exact shape (``analysis/gradient_accumulation._one_optimizer_under``):
one optimizer, a backward on every batch and none under the condition, ``step()`` and ``zero_grad()`` together
under it. Every near miss keeps its control flow."""

from __future__ import annotations

import pytest

from _convert import converted, dedent

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
G = torch.nn.Linear(2, 2)
D = torch.nn.Linear(2, 1)
opt_g = torch.optim.Adam(G.parameters())
opt_d = torch.optim.Adam(D.parameters())
loader = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=2)
"""

NEAR_MISSES = {
    "the generator accumulates while the critic steps every batch": """
        for i, (real,) in enumerate(loader):
            d_loss = D(G(real).detach()).mean() - D(real).mean()
            d_loss.backward()
            opt_d.step()
            opt_d.zero_grad()
            g_loss = -D(G(real)).mean()
            g_loss.backward()
            if i % 5 == 0:
                opt_g.step()
                opt_g.zero_grad()
        """,
    "zeroed every batch": """
        for i, (real,) in enumerate(loader):
            loss = D(G(real)).mean() / 4
            loss.backward()
            opt_g.zero_grad()
            if (i + 1) % 4 == 0:
                opt_g.step()
        """,
    "a backward under the condition too": """
        for i, (real,) in enumerate(loader):
            loss = D(G(real)).mean() / 4
            loss.backward()
            if (i + 1) % 4 == 0:
                D(real).mean().backward()
                opt_g.step()
                opt_g.zero_grad()
        """,
}


@pytest.mark.parametrize("name", list(NEAR_MISSES))
def test_not_accumulation(name: str) -> None:
    out = converted(HEAD + dedent(NEAR_MISSES[name]))
    assert "accumulate(" not in out and "gradient_accumulation_steps" not in out
    assert "% 5 == 0" in out or "% 4 == 0" in out


def test_the_exact_shape_is_accumulation() -> None:
    out = converted(HEAD + dedent("""
        for i, (real,) in enumerate(loader):
            loss = D(G(real)).mean() / 4
            loss.backward()
            if (i + 1) % 4 == 0:
                opt_g.step()
                opt_g.zero_grad()
        """))
    assert "gradient_accumulation_steps=4" in out and "with accelerator.accumulate(" in out
