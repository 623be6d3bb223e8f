"""``analysis/alias_names.py``: a second name bound to the model before ``prepare`` (``model = embedding_net``,
siamese-triplet's online experiments) is the name the training goes on with; it must see the prepared model."""

from __future__ import annotations

from _convert import assert_converts, converted, dedent

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 2)), batch_size=4)
"""

AHEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 2)), batch_size=4)
"""


def test_the_second_name_the_training_uses_is_the_one_prepared() -> None:
    """``embedding_net`` is never read after ``model = embedding_net``: ``model`` is prepared (preparing
    ``embedding_net`` left ``model`` the bare module: each process trained its own copy)."""
    assert_converts(HEAD + """
        embedding_net = torch.nn.Linear(4, 2)
        model = embedding_net
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            optimizer.step()
        """.replace("\n        ", "\n"), AHEAD + """
        embedding_net = torch.nn.Linear(4, 2)
        model = embedding_net
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(((model(x) - y) ** 2).mean())
            optimizer.step()
        accelerator.end_training()
        """.replace("\n        ", "\n"))


def test_a_second_name_that_trains_beside_the_first_is_bound_again_after_prepare() -> None:
    """Both names are used after prepare and the second one runs the forward: it is bound to the prepared model
    right after ``prepare``; the first one's save is unwrapped as any prepared model's."""
    new = converted(HEAD + dedent("""
        embedding_net = torch.nn.Linear(4, 2)
        model = embedding_net
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            optimizer.step()
        torch.save(embedding_net.state_dict(), "net.pt")
        """))
    assert ("embedding_net, optimizer, loader = accelerator.prepare(embedding_net, optimizer, loader)\n"
            "model = embedding_net\n"
            "for x, y in loader:\n") in new, new
    assert "accelerator.unwrap_model(embedding_net).state_dict()" in new, new


def test_a_second_name_kept_for_the_bare_module_stays_bare() -> None:
    """DeiT's ``model_without_ddp = model``, read only for its state: what ``unwrap_model`` would give, left alone."""
    new = converted(HEAD + dedent("""
        model = torch.nn.Linear(4, 2)
        model_without_ddp = model
        optimizer = torch.optim.SGD(model_without_ddp.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            optimizer.step()
        torch.save(model_without_ddp.state_dict(), "net.pt")
        """))
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\nfor x, y in loader:" in new, new
    assert "model_without_ddp = model\n" in new and new.count("model_without_ddp = ") == 1, new


def test_a_later_experiment_training_a_second_name_prepares_it_where_it_is_bound() -> None:
    """A notebook's experiments one after another: the later one trains ``model = embedding_net``; that name is
    prepared right where it is bound (it was left out: only the optimizer was prepared)."""
    new = converted(HEAD + dedent("""
        def fit(loader, model, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                ((model(x) - y) ** 2).mean().backward()
                optimizer.step()
        embedding_net = torch.nn.Linear(4, 2)
        model = torch.nn.Sequential(embedding_net, torch.nn.Linear(2, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        fit(loader, model, optimizer)
        embedding_net = torch.nn.Linear(4, 2)
        model = embedding_net
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        fit(loader, model, optimizer)
        """))
    assert ("embedding_net = torch.nn.Linear(4, 2)\n"
            "model = embedding_net\n"
            "model = accelerator.prepare(model)\n"
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "optimizer = accelerator.prepare(optimizer)\n") in new, new
