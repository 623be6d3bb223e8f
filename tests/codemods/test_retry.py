"""WarnRetry (ACC019) reports an exception handler that trains again, and only that."""

from __future__ import annotations

from _convert import codes

from accelify.pipeline import convert_source
from accelify.program import ModuleText

HELPER = """\
import errno
import os


def make_dir(directory):
    try:
        os.makedirs(directory)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
"""
TRAIN = """\
import torch
from helper import make_dir

model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
make_dir("out")
"""


def test_a_handler_in_another_module_is_not_taken_for_the_training_at_its_position() -> None:
    """Statement positions count per module: the helper's ``except OSError`` sits where the script's backward sits
    in its own file, and it retries nothing (diegoalejogm/gans's ``Logger._make_dir``)."""
    result = convert_source(TRAIN, modules=[ModuleText("helper", "helper.py", HELPER)])
    assert result.status == "converted"
    assert [w.code for w in result.warnings] + [w.code for c in result.companions for w in c.warnings] == []


def test_a_handler_that_trains_again_is_still_reported() -> None:
    code = """
    import torch

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


    def train():
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            optimizer.step()


    try:
        train()
    except RuntimeError:
        train()
    """
    assert codes(code) == ["ACC019:15"]
