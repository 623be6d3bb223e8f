"""RemovePlacement and ReplaceDevice: placement of prepared objects and batches goes; the device
variable becomes accelerator.device or disappears."""

from __future__ import annotations

import pytest
from _convert import assert_converts, assert_unchanged, codes, converted

CASES = [
    (
        "constructor .to(device) stripped, batch placement removed, unused device removed",
        """
        import torch
        from torch.utils.data import DataLoader
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.Linear(2, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(data, batch_size=4)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            x = x.to(device, non_blocking=True)
            opt.step()
        """,
        """
        import torch
        from torch.utils.data import DataLoader
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(data, batch_size=4)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        for x, y in loader:
            opt.step()
        accelerator.end_training()
        """,
    ),
    (
        ".cuda() statements, guarded blocks and model = model.to(device)",
        """
        import torch
        import torch.nn as nn
        use_cuda = torch.cuda.is_available()
        model = nn.Linear(2, 1)
        if use_cuda:
            model.cuda()
        model = model.to("cuda")
        opt = torch.optim.Adam(model.parameters())
        """,
        """
        import torch
        import torch.nn as nn
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        use_cuda = torch.cuda.is_available()
        model = nn.Linear(2, 1)
        opt = torch.optim.Adam(model.parameters())
        model, opt = accelerator.prepare(model, opt)
        accelerator.end_training()
        """,
    ),
    (
        "device still used: it becomes accelerator.device; new names keep their .to(device)",
        """
        import torch
        from torch.utils.data import DataLoader as DL
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = torch.nn.Linear(2, 1)
        model.to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DL(data)
        for (batch,) in loader:
            real = batch.to(device)
            noise = torch.randn(3, device=device)
        """,
        """
        import torch
        from torch.utils.data import DataLoader as DL
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        device = accelerator.device
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DL(data)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        for (batch,) in loader:
            real = batch.to(device)
            noise = torch.randn(3, device=device)
        accelerator.end_training()
        """,
    ),
    (
        "comments of removed statements are kept",
        """
        import torch
        device = torch.device("cuda")  # the GPU
        model = torch.nn.Linear(2, 1)
        # move it
        model.to(device)  # now
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        # the GPU
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        # move it
        # now
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        accelerator.end_training()
        """,
    ),
    (
        "torch.accelerator.current_accelerator() device and torch.cuda.set_device",
        """
        import torch
        torch.cuda.set_device(0)
        device = torch.accelerator.current_accelerator()
        model = torch.nn.Linear(2, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        print(device)
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        device = accelerator.device
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        accelerator.print(device)
        accelerator.end_training()
        """,
    ),
]


@pytest.mark.parametrize(("before", "after"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_placement(before: str, after: str) -> None:
    assert_converts(before, after)


def test_args_device_and_a_helper_reading_it() -> None:
    assert_converts(
        """
        import torch
        def fit(args, model, loader, opt):
            for x in loader:
                x = x.to(args.device)
                model(x).sum().backward()
        def main(args):
            args.device = torch.device("cuda" if args.cuda else "cpu")
            model = torch.nn.Linear(2, 1).to(args.device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(data)
            fit(args, model, loader, opt)
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        def fit(args, model, loader, opt, accelerator):
            for x in loader:
                accelerator.backward(model(x).sum())
        def main(args):
            accelerator = Accelerator(cpu=not args.cuda)
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(data)
            model, opt, loader = accelerator.prepare(model, opt, loader)
            fit(args, model, loader, opt, accelerator)
            accelerator.end_training()
        """,
    )


NEAR_MISSES = [
    # placement with a dtype is not pure placement
    """
    import torch
    x = torch.ones(2)
    x = x.to(torch.float16)
    """,
    # a model without an optimizer is not prepared: its placement stays
    """
    import torch
    device = torch.device("cuda")
    model = torch.nn.Linear(2, 1).to(device)
    """,
]


@pytest.mark.parametrize("code", NEAR_MISSES)
def test_placement_near_misses(code: str) -> None:
    assert_unchanged(code)


def test_unprepared_batch_placement_with_an_unknown_device_is_reported() -> None:
    code = """
    import torch
    def infer(model, batch, dev):
        return model(batch.to(dev))
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    assert "batch.to(dev)" in converted(code)
    assert codes(code) == ["ACC002:3"]


def test_skip_comment_keeps_a_placement() -> None:
    out = converted(
        """
        import torch
        device = torch.device("cuda")
        model = torch.nn.Linear(2, 1)
        model.to(device)  # accelify: skip
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """
    )
    assert "model.to(device)  # accelify: skip" in out
    assert "device = accelerator.device" in out


def test_device_used_in_a_lambda_or_comprehension_is_kept() -> None:
    out = converted(
        """
        import torch
        class T:
            def __init__(self):
                self.device = torch.device("cuda")
                self.model = torch.nn.Linear(2, 1).to(self.device)
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.move = lambda t: t.to(self.device)
            @staticmethod
            def helper(x):
                return x.cuda()
        """
    )
    assert "        self.device = self.accelerator.device\n" in out
    assert "lambda t: t.to(self.device)" in out
    assert "        return x.cuda()\n" in out  # a static method has no self.accelerator


PLACEMENT_HEAD = """\
import torch
from torch.utils.data import DataLoader
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = torch.nn.Linear(2, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(ds, batch_size=4)
"""

# Each line does more than place the object on the device, so it stays exactly as written.
PLACEMENT_NOOP = [
    "model = model.to(dtype=torch.float16)",
    "model.to(memory_format=torch.channels_last)",
    "    x = x.to(memory_format=torch.channels_last)",
    "    x = x.to(device, dtype=torch.float16)",
    "    x = x.to(torch.float16)",
]


@pytest.mark.parametrize("line", PLACEMENT_NOOP)
def test_placement_noop(line: str) -> None:
    loop = "for x in loader:\n" if line.startswith(" ") else ""
    out = converted(PLACEMENT_HEAD + loop + line + "\n")
    assert f"\n{line}\n" in out


def test_non_blocking_batch_placement_is_removed() -> None:
    out = converted(PLACEMENT_HEAD + "for x in loader:\n    x = x.to(device, non_blocking=True)\n    model(x).sum().backward()\n")
    assert "x.to(" not in out and "    accelerator.backward(model(x).sum())\n" in out


def test_placement_in_nested_functions_and_lambdas_keeps_the_device() -> None:
    out = converted(
        PLACEMENT_HEAD
        + "def outer():\n    def inner(b):\n        return b.to(device)\n    f = lambda b: b.to(device)\n    return inner, f\n"
        + "for x in loader:\n    model(x).sum().backward()\n"
    )
    assert "device = accelerator.device\n" in out
    assert "        return b.to(device)\n" in out and "    f = lambda b: b.to(device)\n" in out


def test_availability_guard_that_only_placed_batches_goes_away() -> None:
    out = converted(
        PLACEMENT_HEAD
        + "for x, y in loader:\n    if torch.cuda.is_available():\n        x, y = x.cuda(), y.cuda()\n"
        + "    model(x).sum().backward()\n"
    )
    assert "is_available():\n" not in out.split("loader = accelerator")[-1] and "pass" not in out
    assert "for x, y in loader:\n    accelerator.backward(model(x).sum())\n" in out


def test_guard_with_a_call_that_may_have_side_effects_stays() -> None:
    out = converted(
        PLACEMENT_HEAD + "for x in loader:\n    if ready():\n        x = x.cuda()\n    model(x).sum().backward()\n"
    )
    assert "    if ready():\n        pass\n" in out


HELPER_DEVICE = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class CudaUtils:
    @staticmethod
    def get_device():
        if torch.cuda.is_available():
            return torch.device('cuda:0')
        else:
            return torch.device('cpu')


def get_device():
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def main():
    device = {made}
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    torch.save(torch.zeros(1).to(device), "z.pt")
"""


@pytest.mark.parametrize("made", ["CudaUtils.get_device()", "get_device()"])
def test_a_device_a_helper_returns_becomes_the_accelerators(made: str) -> None:
    """``device = CudaUtils.get_device()`` (a static method) or ``get_device()`` returning ``torch.device('cuda:0')``
    or, without CUDA, ``torch.device('cpu')``: the device of every process would be GPU 0; it was left with ACC002."""
    source = HELPER_DEVICE.format(made=made)
    out = converted(source)
    assert "    device = accelerator.device\n" in out, out
    assert "x.to(device)" not in out and "torch.nn.Linear(4, 1)\n" in out
    assert codes(source) == []


OWN_DEVICE = """
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        mask = torch.ones(x.shape[0], 2).to(x.device)
        return self.fc(x) * mask

    def survival(self):
        var = torch.bernoulli(torch.tensor(0.5).float())
        return torch.equal(var, torch.tensor(1).float().to(var.device))


def noise(t):
    return torch.randn(t.shape).to(t.device)


def run(args):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        zero = torch.zeros(2).to(y.float().device)
        loss = nn.functional.cross_entropy(model(x + noise(x)) + zero, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    extra = torch.zeros(2).to({setting})
"""


@pytest.mark.parametrize("setting", ["args.device", "settings.device"])
def test_a_tensors_own_device_is_no_unknown_device(setting: str) -> None:
    """``.to(x.device)`` of a tensor (a forward's input, a torch value, a batch, a helper's tensor argument) is
    device-agnostic and right as written; a setting that holds a device still is reported."""
    code = OWN_DEVICE.replace("{setting}", setting)
    assert codes(code) == ["ACC002:37"]
    new = converted(code)
    assert ".to(x.device)" in new and ".to(var.device)" in new and ".to(t.device)" in new


FACTORY = """
import argparse
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


def get_network(args):
    if args.net == "a":
        net = Net()
    elif args.net == "b":
        net = nn.Sequential(nn.Linear(4, 2))
    else:
        net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    if args.gpu:
        net = net.cuda()
    return net


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--net", default="a")
    parser.add_argument("--gpu", action="store_true")
    args = parser.parse_args()
    net = get_network(args){teacher}
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    for x, y in loader:
        if args.gpu:
            x, y = x.cuda(), y.cuda()
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_factory_placing_whichever_model_an_arm_made_loses_the_placement() -> None:
    """``get_network(args)`` picks a model in an ``if``/``elif``/``else`` and moves it with ``.cuda()``: the model it
    returns is the one ``prepare`` places, whichever arm made it."""
    new = converted(FACTORY.replace("{teacher}", ""))
    assert "net.cuda()" not in new and "if args.gpu" not in new.split("def main")[0]
    assert codes(FACTORY.replace("{teacher}", "")) == []


def test_a_factory_that_also_makes_an_unprepared_model_keeps_its_placement() -> None:
    """A second call (``teacher = get_network(args)``) makes a model ``prepare`` never sees: the factory's
    ``.cuda()`` is not removed, so the teacher is not left on the CPU. It was kept (ACC001); every call of the factory
    runs once the accelerator exists, so it goes to the process state's device, the accelerator's (sixteenth stop:
    set U's U2, ``.cuda()`` in a helper the accelerator does not reach)."""
    code = FACTORY.replace("{teacher}", "\n    teacher = get_network(args)")
    new = converted(code)
    assert "    net = net.to(PartialState().device)\n    return net\n" in new, new
    assert codes(code) == []


TRAINER_WITH_ARGS = """
        import argparse
        import torch


        class Trainer:
            def __init__(self, *args, **kwargs):
                self.args = kwargs["args"]
                self.model = kwargs["model"].to(self.args.device)
                self.optimizer = kwargs["optimizer"]

            def train(self, loader):
                for x, y in loader:
                    mask = torch.ones(2).to(self.args.device)
                    loss = torch.nn.functional.mse_loss(self.model(x * mask), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--disable-cuda", action="store_true")
            args = parser.parse_args()
            if not args.disable_cuda and torch.cuda.is_available():
                args.device = torch.device("cuda")
            else:
                args.device = torch.device("cpu")
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(data, batch_size=4)
            trainer = Trainer(model=model, optimizer=optimizer, args=args)
            trainer.train(loader)
"""


def test_a_device_set_on_args_and_read_by_a_trainer_holding_args_stays_bound() -> None:
    """Set I's I10 (SimCLR, W14): ``args.device = ...`` in ``main()`` was removed as unused, but the trainer class
    built with ``args=args`` reads ``self.args.device`` (an AttributeError). ``self.args`` is followed to the ``args``
    its construction passes: the device stays, bound to ``accelerator.device``."""
    assert_converts(
        TRAINER_WITH_ARGS,
        """
        import argparse
        import torch
        from accelify.runtime import Accelerator


        class Trainer:
            def __init__(self, *args, accelerator, **kwargs):
                self.accelerator = accelerator
                self.args = kwargs["args"]
                self.model = kwargs["model"].to(self.args.device)
                self.optimizer = kwargs["optimizer"]

            def train(self, loader):
                for x, y in loader:
                    mask = torch.ones(2).to(self.args.device)
                    loss = torch.nn.functional.mse_loss(self.model(x * mask), y)
                    self.optimizer.zero_grad()
                    self.accelerator.backward(loss)
                    self.optimizer.step()


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--disable-cuda", action="store_true")
            args = parser.parse_args()
            accelerator = Accelerator(cpu=args.disable_cuda)
            if not args.disable_cuda and torch.cuda.is_available():
                args.device = accelerator.device
            else:
                args.device = accelerator.device
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(data, batch_size=4)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            trainer = Trainer(model=model, optimizer=optimizer, args=args, accelerator=accelerator)
            trainer.train(loader)
            accelerator.end_training()
        """,
    )
    assert not [c for c in codes(TRAINER_WITH_ARGS) if c.startswith("ACC002")]  # ``self.args.device`` is the accelerator's
