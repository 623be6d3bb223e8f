"""Training data followed to a library batch iterator that is no DataLoader (torchtext's legacy iterators) is
refused with ACC038, however the iterator is built: one call, or one per split with ``.splits(...)``."""

from __future__ import annotations

import pytest
from _convert import codes

SCRIPT = """\
import torch
from torchtext.data import BucketIterator


def load_dataset(batch_size):
{build}


def main():
    {take}
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in train_iter:
        model(batch.src).sum().backward()
        opt.step()
"""


@pytest.mark.parametrize(
    "build, take",
    [
        ("    train_iter = BucketIterator(train, batch_size=batch_size)\n    return train_iter",
         "train_iter = load_dataset(32)"),
        # keon/seq2seq's utils.load_dataset: one iterator per split, returned with the vocabularies
        ("    train_iter, val_iter = BucketIterator.splits((train, val), batch_size=batch_size)\n"
         "    return train_iter, val_iter, 5", "train_iter, val_iter, n = load_dataset(32)"),
    ],
)
def test_a_torchtext_iterator_followed_to_where_it_is_built_is_refused(build: str, take: str) -> None:
    assert codes(SCRIPT.format(build=build, take=take)) == ["ACC038:14"]
