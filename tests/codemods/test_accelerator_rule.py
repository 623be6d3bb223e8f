"""CreateAccelerator and AddAcceleratorImport: where the accelerator and its import go, and its arguments."""

from __future__ import annotations

import pytest
from _convert import assert_converts, assert_unchanged, converted, dedent

from accelify.pipeline import convert_source

TAIL_IN = """
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def main_with(lines: str) -> str:
    body = "".join(f"    {line}\n" for line in dedent(lines).splitlines())
    return "import argparse\nimport torch\n\n\ndef main():\n" + body


FLAG_CASES = [
    (
        "--no-cuda inside the device expression",
        'device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")',
        "cpu=args.no_cuda",
    ),
    ("use_cuda flag", "use_cuda = not args.no_cuda and torch.cuda.is_available()\ndevice = torch.device(\"cuda\" if use_cuda else \"cpu\")", "cpu=args.no_cuda"),
    ("args.cuda flag", "args.cuda = not args.no_cuda and torch.cuda.is_available()", "cpu=args.no_cuda"),
    ("--cpu, inverted ternary", 'device = "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"', "cpu=args.cpu"),
    ("a flag that is not derived", 'device = torch.device("cuda" if args.gpu else "cpu")', "cpu=not args.gpu"),
    ("availability only", 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")', ""),
    # set I's I4 (W5): a probe of the machine kept in a name is no CPU switch (it was ``cpu=not has_mps``: the CPU on
    # every CUDA machine)
    ("mps, cuda or cpu by probes", 'has_mps = torch.backends.mps.is_built()\n'
     'device = "mps" if has_mps else "cuda" if torch.cuda.is_available() else "cpu"', ""),
    ("mps, cuda or cpu by probes, in torch.device", 'has_mps = torch.backends.mps.is_available()\n'
     'device = torch.device("mps" if has_mps else "cuda" if torch.cuda.is_available() else "cpu")', ""),
    ("mps or cuda by probes, then a user's switch", 'device = "mps" if torch.backends.mps.is_available() else '
     '"cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu"', ""),
    ("a user's switch for each device", 'device = "mps" if args.mps else "cuda" if args.cuda else "cpu"',
     "cpu=not args.mps and not args.cuda"),
    ("probes in branches", 'has_mps = torch.backends.mps.is_built()\nif has_mps:\n    device = torch.device("mps")\n'
     'elif torch.cuda.is_available():\n    device = torch.device("cuda")\nelse:\n    device = torch.device("cpu")', ""),
]


@pytest.mark.parametrize(("lines", "arguments"), [c[1:] for c in FLAG_CASES], ids=[c[0] for c in FLAG_CASES])
def test_cpu_argument_from_the_device_flags(lines: str, arguments: str) -> None:
    before = main_with("parser = argparse.ArgumentParser()\nargs = parser.parse_args()\n" + lines + TAIL_IN)
    out = converted(before)
    assert f"accelerator = Accelerator({arguments})" in out
    if arguments:  # right after the arguments it reads
        assert f"    args = parser.parse_args()\n    accelerator = Accelerator({arguments})\n" in out
    else:  # as early as possible
        assert "def main():\n    accelerator = Accelerator()\n    parser" in out


def test_module_script_gets_the_accelerator_after_the_imports() -> None:
    assert_converts(
        '''
        """Docstring."""
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ''',
        '''
        """Docstring."""
        import torch
        from torch import nn
        from accelify.runtime import Accelerator

        accelerator = Accelerator(cpu=True)
        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = accelerator.prepare(model, opt)
        accelerator.end_training()
        ''',
    )


def test_target_accelerate_changes_only_the_import() -> None:
    code = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    ours = convert_source(code).new
    theirs = convert_source(code, target="accelerate").new
    assert theirs == ours.replace("from accelify.runtime import", "from accelerate import")
    assert convert_source(theirs).status == "unchanged"


def test_import_goes_after_the_future_import_and_the_import_block() -> None:
    out = converted(
        """
        from __future__ import annotations
        import torch
        try:
            import tqdm
        except ImportError:
            tqdm = None
        X = 1
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        """
    )
    assert out.startswith(
        "from __future__ import annotations\nimport torch\ntry:\n    import tqdm\nexcept ImportError:\n    tqdm = None\n"
        "from accelify.runtime import Accelerator\naccelerator = Accelerator(cpu=True)\nX = 1\n"
    )


def test_trainer_class_gets_self_accelerator_first_in_init() -> None:
    out = converted(
        """
        import torch
        class Trainer:
            def __init__(self, lr):
                self.lr = lr
                self.model = torch.nn.Linear(2, 1)
                self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)
            def fit(self, x):
                for _ in range(3):
                    self.model(x).sum().backward()
        """
    )
    assert "    def __init__(self, lr):\n        self.accelerator = Accelerator(cpu=True)\n        self.lr = lr\n" in out
    assert "self.model, self.opt = self.accelerator.prepare(self.model, self.opt)\n" in out
    assert "            self.accelerator.backward(self.model(x).sum())\n        self.accelerator.end_training()\n" in out


NEAR_MISSES = [
    "import torch\nx = torch.ones(3)\nprint(x.sum())\n",  # no training objects
    "import numpy as np\nmodel = Net()\n",  # not a torch script
    "import torch\nfrom accelerate import Accelerator\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters())\n",
    "",  # empty file
]


@pytest.mark.parametrize("code", NEAR_MISSES)
def test_nothing_to_create(code: str) -> None:
    assert_unchanged(code)


def test_a_device_chosen_branch_by_branch_keeps_every_opt_in() -> None:
    """pytorch/examples' DCGAN: ``if opt.cuda: cuda:0 / elif use_mps: mps / else: cpu`` is the CPU unless one
    of the flags asks for a device (``cpu=not opt.mps`` trained on the CPU with --cuda)."""
    from _convert import converted

    out = converted(
        """
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--cuda", action="store_true")
        parser.add_argument("--mps", action="store_true")
        opt = parser.parse_args()
        use_mps = opt.mps and torch.backends.mps.is_available()
        if opt.cuda:
            device = torch.device("cuda:0")
        elif use_mps:
            device = torch.device("mps")
        else:
            device = torch.device("cpu")
        model = torch.nn.Linear(2, 1).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.ones(4, 2, device=device):
            model(x).sum().backward()
            optimizer.step()
        """
    )
    assert "accelerator = Accelerator(cpu=not (opt.cuda or opt.mps))" in out


def test_a_device_chosen_among_mps_cuda_and_cpu_by_probes_is_no_cpu_switch() -> None:
    """Set I's I4 (W5): ``has_mps = torch.backends.mps.is_built()`` then ``"mps" if has_mps else "cuda" if
    torch.cuda.is_available() else "cpu"`` was read as a user's CPU switch, ``Accelerator(cpu=not has_mps)``: the CPU
    on every CUDA machine. A probe of the machine (kept in a name or not) is never a CPU switch, and the chain is a
    device variable: both bindings become ``accelerator.device``."""
    assert_converts(
        """
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        has_mps = torch.backends.mps.is_built()
        device = "mps" if has_mps else "cuda" if torch.cuda.is_available() else "cpu"
        print(f"Using device: {device}")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = nn.Linear(2, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
            opt.step()
        """,
        """
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        from accelify.runtime import Accelerator

        accelerator = Accelerator()
        has_mps = torch.backends.mps.is_built()
        device = accelerator.device
        accelerator.print(f"Using device: {device}")
        device = accelerator.device
        model = nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        for x, y in loader:
            opt.zero_grad()
            accelerator.backward(nn.functional.mse_loss(model(x.to(device)), y.to(device)))
            opt.step()
        accelerator.end_training()
        """,
    )


EMA_MODEL = """
import copy
import torch
from torch import nn


class WithEMA(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.ema = copy.deepcopy(net)

    def forward(self, x):
        return self.net(x)


def build():
    model = WithEMA(nn.Linear(2, 1))
    return model


model = build()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=2)
for (x,) in loader:
    model(x).sum().backward()
    opt.step()
"""


def test_a_submodule_the_forward_never_runs_makes_ddp_look_for_unused_parameters() -> None:
    """Set I's I8 (DDPM, W4): ``self.ema = deepcopy(net)`` that ``forward`` never reads gets no gradient; DDP stops
    at the second step. The model is built by a helper that returns it: followed to its class. The accelerator finds
    unused parameters; the same model whose forward reads the copy (or reaches its submodules by name) does not."""
    out = converted(EMA_MODEL)
    assert "accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])" in out
    assert "from accelify.runtime import Accelerator, DistributedDataParallelKwargs" in out
    for forward in ("return self.net(x) + 0 * self.ema(x)", "return self.net(x) if self.training else self.ema(x)",
                    "return [m for m in self.children()][0](x)"):
        out = converted(EMA_MODEL.replace("return self.net(x)", forward))
        assert "accelerator = Accelerator()" in out and "find_unused_parameters" not in out, forward
    # a loss or an activation kept as an attribute holds no parameters: nothing for DDP to miss
    out = converted(EMA_MODEL.replace("self.ema = copy.deepcopy(net)", "self.criterion = nn.MSELoss()\n        self.act = nn.ReLU()"))
    assert "accelerator = Accelerator()" in out and "find_unused_parameters" not in out
