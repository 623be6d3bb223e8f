"""SwapBackward: before/after cases and near-misses."""

from __future__ import annotations

import pytest
from _convert import assert_converts, assert_unchanged, codes, converted, dedent

HEAD = """\
import torch
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
"""
HEAD_OUT = """\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = accelerator.prepare(model, opt)
"""

CASES = [
    ("loss.backward()\n", "accelerator.backward(loss)\n"),
    ("(loss / 4).backward(retain_graph=True)\n", "accelerator.backward(loss / 4, retain_graph=True)\n"),
    ("model(x).sum().backward()\n", "accelerator.backward(model(x).sum())\n"),
    ("if ok: loss.backward()  # keep\n", "if ok: accelerator.backward(loss)  # keep\n"),
]


@pytest.mark.parametrize(("before", "after"), CASES)
def test_backward_is_swapped(before: str, after: str) -> None:
    assert_converts(HEAD + before, HEAD_OUT + after + "accelerator.end_training()\n")


def test_backward_in_a_helper_threads_the_accelerator() -> None:
    assert_converts(
        """
        import torch
        def step(model, opt, x):
            loss = model(x).sum()
            loss.backward()
            opt.step()
        def main():
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            step(model, opt, torch.ones(2))
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        def step(model, opt, x, accelerator):
            loss = model(x).sum()
            accelerator.backward(loss)
            opt.step()
        def main():
            accelerator = Accelerator(cpu=True)
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt = accelerator.prepare(model, opt)
            step(model, opt, torch.ones(2), accelerator)
            accelerator.end_training()
        """,
    )


NEAR_MISSES = [
    # no optimizer: nothing is prepared, so nothing is converted (a warning says why)
    "import torch\nloss = torch.ones(1, requires_grad=True).sum()\nloss.backward()\n",
    # already converted
    "import torch\nfrom accelify.runtime import Accelerator\naccelerator = Accelerator(cpu=True)\nloss.backward()\n",
    # not a torch script
    "loss.backward()\n",
    # suppressed
    HEAD + "loss.backward()  # accelify: skip\n# accelify: skip-file\n",
]


@pytest.mark.parametrize("code", NEAR_MISSES)
def test_backward_near_misses(code: str) -> None:
    assert_unchanged(code)


def test_backward_without_optimizer_warns() -> None:
    assert codes("import torch\nloss = torch.ones(1, requires_grad=True).sum()\nloss.backward()\n") == ["ACC012:3"]


def test_backward_with_positional_arguments_names_them() -> None:
    """WGAN's ``d_loss_real.backward(mone)``: the gradient goes on as ``gradient=`` (both runtimes hand keywords to
    ``loss.backward``), and a second positional one as ``retain_graph=``."""
    code = HEAD + "loss.backward(torch.ones(1))\nloss.backward(mone, True, create_graph=False)\n"
    out = __import__("_convert").converted(code)
    assert "accelerator.backward(loss, gradient=torch.ones(1))" in out
    assert "accelerator.backward(loss, gradient=mone, retain_graph=True, create_graph=False)" in out
    assert codes(code) == []


def test_backward_with_unpacked_arguments_warns_and_stays() -> None:
    code = HEAD + "loss.backward(*grads)\n"
    assert "loss.backward(*grads)" in __import__("_convert").converted(code)
    assert codes(code) == ["ACC010:4"]


def test_scaler_backward_goes_through_the_accelerator() -> None:
    code = HEAD + "scaler = torch.cuda.amp.GradScaler()\nscaler.scale(loss).backward()\n"
    out = __import__("_convert").converted(code)
    assert "accelerator.backward(loss)\n" in out and "scaler" not in out
    assert codes(code) == []


LOOP_HEAD = HEAD + "for x in loader:\n"

# Each ``_noop`` line is not a loss's backward: it stays exactly as written in the converted file.
BACKWARD_NOOP = [
    # a trainer's own `backward` method, and its parent's
    "    self.backward()",
    "    super().backward(x)",
    # torch.autograd.backward is a module function, not `<tensor>.backward`
    "    torch.autograd.backward(tensors=model(x).sum())",
]


@pytest.mark.parametrize("line", BACKWARD_NOOP)
def test_backward_noop(line: str) -> None:
    out = converted(LOOP_HEAD + "    loss = model(x).sum()\n    loss.backward()\n" + line + "\n")
    assert f"\n{line}\n" in out
    assert "    accelerator.backward(loss)\n" in out


def test_backward_method_definitions_and_calls_on_self_are_not_swapped() -> None:
    code = dedent(
        """
        import torch
        class Trainer:
            def __init__(self):
                self.model = torch.nn.Linear(2, 1)
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
            def backward(self, loss):
                loss.backward()
            def fit(self, x):
                self.backward(self.model(x).sum())
        """
    )
    out = converted(code)
    assert "    def backward(self, loss):\n        self.accelerator.backward(loss)\n" in out
    assert "        self.backward(self.model(x).sum())\n" in out
    assert codes(code) == []


BACKWARD_CONVERTS = [
    # a keyword gradient is passed on by accelerator.backward
    ("    y.backward(gradient=torch.ones_like(y))", "    accelerator.backward(y, gradient=torch.ones_like(y))"),
    # inside a lambda
    ("    step = lambda: model(x).sum().backward()", "    step = lambda: accelerator.backward(model(x).sum())"),
]


@pytest.mark.parametrize(("before", "after"), BACKWARD_CONVERTS)
def test_backward_in_keyword_and_lambda_forms(before: str, after: str) -> None:
    assert f"\n{after}\n" in converted(LOOP_HEAD + before + "\n")


def test_positional_gradient_is_named() -> None:
    code = LOOP_HEAD + "    out = model(x)\n    out.backward(torch.ones_like(out))\n"
    assert codes(code) == []
    assert "accelerator.backward(out, gradient=torch.ones_like(out))" in converted(code)
