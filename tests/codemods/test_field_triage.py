"""Classes the field tests had only warned about (true warnings on shapes the converter can convert itself), found by
triaging the refused and warned rows of docs/FIELD_TESTS.md (twelfth stop); each test names the programs that had it."""

from __future__ import annotations

import pytest
from _convert import codes, converted

INDEXED_DEVICE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    gpu = 3
    device = torch.device({choice} if torch.cuda.is_available() else "cpu")
    net = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    for epoch in range(2):
        for x, y in loader:
            loss = ((net(x.to(device)) - y.to(device)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(epoch, loss.item())
"""


@pytest.mark.parametrize("choice", ['"cuda:{}".format(gpu)', 'f"cuda:{gpu}"', '"cuda:" + str(gpu)', '"cuda:%d" % gpu'])
def test_a_gpu_index_put_into_the_device_string_is_a_device_choice(choice: str) -> None:
    """O10 (``torch.device("cuda:{}".format(gpu) if ... else "cpu")`` with ``gpu = 3``): the line was left and every
    ``.to(device)`` warned (ACC002): on GPUs the batches went to GPU 3 and the prepared model to each process's own.
    Under the launcher each process has its own GPU: the line becomes the accelerator's device."""
    source = INDEXED_DEVICE.format(choice=choice)
    new = converted(source)
    assert "    device = accelerator.device\n" in new
    assert "cuda:" not in new
    assert codes(source) == []


@pytest.mark.parametrize(("text", "device"), [
    ('"cuda:{}".format(args.gpu)', True), ('f"cuda:{rank}"', True), ('"cuda:" + str(i)', True), ('"cuda:%d" % i', True),
    ('"cuda"', True), ('"cuda:1"', True),
    ('f"cuda: {ok}"', False), ('f"cuda:{i} of {n}"', False), ('"cuda: {}".format(ok)', False), ('"cuda available: " + s', False),
    ('"{}:{}".format(kind, i)', False),
])
def test_only_a_cuda_string_with_an_index_in_it_is_a_cuda_choice(text: str, device: bool) -> None:
    """Near misses: text that mentions CUDA (a log line) is not a device string."""
    import libcst as cst

    from accelify.codemods.analysis.roles import is_cuda_choice

    assert is_cuda_choice(cst.parse_expression(text)) is device


FACTORY_WITH_NONE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def create_dataloader(dataset, batch_size=8):
    if dataset is None:
        return None
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def train(loader, net, opt):
    for epoch in range(2):
        for x, y in loader:
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(epoch, loss.item())


def main():
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = create_dataloader(dataset, 8)
    if loader is None:
        return
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    train(loader, net, opt)


if __name__ == "__main__":
    main()
"""


def test_a_loader_factory_that_returns_none_on_failure_still_makes_a_loader() -> None:
    """O7 (``create_dataloader`` returns ``None`` when it has no data set, else a DataLoader): the loader was taken
    for something else and left out of ``prepare`` (a false ACC022, and with O7's other branch fixed no warning at
    all: every process walked the whole data set). A ``return None`` beside the other returns does not decide."""
    new = converted(FACTORY_WITH_NONE)
    assert "    net, opt, loader = accelerator.prepare(net, opt, loader)\n" in new
    assert codes(FACTORY_WITH_NONE) == []


def test_a_factory_whose_returns_are_all_none_makes_nothing() -> None:
    """Near miss: a helper that only ever returns ``None`` is not a loader factory."""
    source = FACTORY_WITH_NONE.replace("    return DataLoader(dataset, batch_size=batch_size, shuffle=True)\n", "    return None\n")
    new = converted(source)
    assert "prepare(net, opt)\n" in new
