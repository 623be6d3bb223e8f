"""SafeStartup: a data set downloaded where it is written inside a bigger statement, or inside a helper of the
program, is built on the main process first (pytorch/examples mnist_rnn, pytorch-cifar100's ``utils.py``)."""

from __future__ import annotations

from _convert import codes, converted

HEAD = "import torch\nfrom torchvision import datasets, transforms\nfrom torch.utils.data import DataLoader\n\n\n"
TRAIN = (
    "    model = torch.nn.Linear(784, 10)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    for x, y in loader:\n        optimizer.zero_grad()\n"
    "        torch.nn.functional.cross_entropy(model(x.view(len(x), -1)), y).backward()\n        optimizer.step()\n\n\nmain()\n"
)


def test_a_download_written_inside_the_loader_call_builds_the_loader_on_the_main_process_first() -> None:
    code = HEAD + (
        "def main():\n    loader = DataLoader(\n        datasets.MNIST('../data', train=True, download=True,\n"
        "                       transform=transforms.Compose([transforms.ToTensor()])),\n        batch_size=64, shuffle=True)\n"
    ) + TRAIN
    assert codes(code) == []
    assert (
        "    with accelerator.main_process_first():\n        loader = DataLoader(\n"
        "            datasets.MNIST('../data', train=True, download=True,\n"
    ) in converted(code)


def test_a_download_in_a_helper_of_the_program_puts_its_call_on_the_main_process_first() -> None:
    code = HEAD + (
        "def get_training_dataloader(batch_size=16):\n"
        "    training = datasets.CIFAR100(root='./data', train=True, download=True, transform=transforms.ToTensor())\n"
        "    return DataLoader(training, shuffle=True, batch_size=batch_size)\n\n\n"
        "def main():\n    loader = get_training_dataloader(batch_size=8)\n"
    ) + TRAIN
    new = converted(code)
    assert codes(code) == []
    assert "    with accelerator.main_process_first():\n        loader = get_training_dataloader(batch_size=8)\n" in new
    assert "    training = datasets.CIFAR100(root='./data', train=True, download=True" in new  # the helper is as it was


def test_a_download_that_cannot_be_put_on_the_main_process_first_is_reported() -> None:
    in_a_loop_header = HEAD + (
        "def main():\n    model = torch.nn.Linear(784, 10)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in DataLoader(datasets.MNIST('../data', download=True), batch_size=4):\n"
        "        optimizer.zero_grad()\n        model(x.view(len(x), -1)).sum().backward()\n        optimizer.step()\n\n\nmain()\n"
    )
    assert codes(in_a_loop_header) == ["ACC018:9"]
    before_the_accelerator = HEAD + (
        "def get_set():\n    return datasets.MNIST('../data', download=True)\n\n\nDATA = get_set()\n\n\n"
        "def main():\n    loader = DataLoader(DATA, batch_size=4)\n"
    ) + TRAIN
    assert codes(before_the_accelerator) == ["ACC018:7"]
