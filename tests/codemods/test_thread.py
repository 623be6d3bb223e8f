"""ThreadAccelerator: helpers get the accelerator as a parameter; call sites pass it."""

from __future__ import annotations

import pytest
from _convert import assert_converts, converted

BUILD = """\
def main():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(ds)
"""


def test_device_parameter_is_replaced_in_place_at_every_call_site() -> None:
    assert_converts(
        """
        import torch
        def train(model, device, loader, opt):
            for x in loader:
                x = x.to(device)
                model(x).sum().backward()
        def run(model, device, loader, opt):
            train(model, device, loader, opt)
            train(model, device=device, loader=loader, opt=opt)
        def main():
            device = torch.device("cuda")
            model = torch.nn.Linear(2, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(ds)
            run(model, device, loader, opt)
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        def train(model, accelerator, loader, opt):
            for x in loader:
                accelerator.backward(model(x).sum())
        def run(model, accelerator, loader, opt):
            train(model, accelerator, loader, opt)
            train(model, accelerator=accelerator, loader=loader, opt=opt)
        def main():
            accelerator = Accelerator()
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(ds)
            model, opt, loader = accelerator.prepare(model, opt, loader)
            run(model, accelerator, loader, opt)
            accelerator.end_training()
        """,
    )


@pytest.mark.parametrize(
    ("signature", "call", "new_signature", "new_call"),
    [
        ("def step(model, opt):", "step(model, opt)", "def step(model, opt, accelerator):", "step(model, opt, accelerator)"),
        ("def step(model, opt, k=1):", "step(model, opt)", "def step(model, opt, k=1, *, accelerator):", "step(model, opt, accelerator=accelerator)"),
        ("def step(model, opt, *rest):", "step(model, opt)", "def step(model, opt, *rest, accelerator):", "step(model, opt, accelerator=accelerator)"),
        ("def step(model, opt):", "step(model=model, opt=opt)", "def step(model, opt, accelerator):", "step(model=model, opt=opt, accelerator=accelerator)"),
    ],
)
def test_accelerator_parameter_is_added(signature: str, call: str, new_signature: str, new_call: str) -> None:
    code = f"import torch\n{signature}\n    model(x).sum().backward()\n{BUILD}    {call}\n"
    out = converted(code)
    assert new_signature in out and f"    {new_call}\n" in out


def test_device_parameter_still_used_stays_and_accelerator_is_added() -> None:
    out = converted(
        """
        import torch
        def step(model, device):
            noise = torch.randn(3, device=device)
            model(noise).sum().backward()
        def main():
            device = torch.device("cuda")
            model = torch.nn.Linear(3, 1).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            step(model, device)
        """
    )
    assert "def step(model, device, accelerator):" in out
    assert "    device = accelerator.device\n" in out
    assert "    step(model, device, accelerator)\n" in out


def test_helpers_of_a_module_script_use_the_global_accelerator() -> None:
    out = converted(
        """
        import torch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        def train():
            model(x).sum().backward()
            print("done")
        train()
        """
    )
    assert "def train():\n    accelerator.backward(model(x).sum())\n    accelerator.print(\"done\")\n" in out


def test_helper_called_where_there_is_no_accelerator_is_not_threaded_and_warned() -> None:
    code = """
    import torch
    def helper(x):
        x.backward()
    def main():
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        helper(model(x).sum())
    helper(torch.ones(1))
    """
    out = converted(code)
    assert "def helper(x):\n    x.backward()" in out and "    helper(model(x).sum())\n" in out
    from _convert import codes

    assert codes(code) == ["ACC009:3"]
