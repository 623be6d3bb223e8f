"""The hooks that record logged and returned values (``accelify_verify_logged``, ``accelify_verify_returns``), in
this process with a stand-in recorder: what becomes a line, and what is left out."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import types
from typing import Any

import pytest
import torch

from accelify.verify.hook import HOOK_DIR
from accelify.verify.hook import accelify_verify_logged as logged
from accelify.verify.hook import accelify_verify_returns as returns

SCRIPT = "/project/script/train.py"  # a file name the hooks see; nothing is read there


class StandIn:
    """The recorder's side that the hooks use: where a file is in the script, batches drawn, lines recorded."""

    def __init__(self) -> None:
        self.active, self.in_epoch, self.draws = True, False, 0
        self.lines: list[tuple[str, str, bool, str | None]] = []

    def _relative(self, filename: str) -> str | None:
        return "train.py" if filename == SCRIPT else None

    def on_line(self, text: str, caller: Any, silent: bool = False, via: str = "print",
                site: str | None = None) -> None:
        self.lines.append((text, via, silent, site))


def test_scalar_takes_numbers_and_one_element_tensors_only() -> None:
    assert [logged.scalar(v) for v in (3, 0.5, torch.tensor(2.5), torch.tensor([1.5]))] == [3.0, 0.5, 2.5, 1.5]
    assert [logged.scalar(v) for v in (True, None, "0.5", torch.ones(2), [1.0])] == [None] * 5


def test_trackers_record_each_number_and_a_process_that_logs_nothing_records_silently() -> None:
    recorder = StandIn()

    class SummaryWriter:
        def add_scalar(self, tag: str, value: Any, step: int | None = None) -> None: ...
        def add_scalars(self, main: str, values: dict, step: int | None = None) -> None: ...

    class Accelerator:
        is_main_process = False

        def log(self, values: dict, step: int | None = None) -> None:
            SummaryWriter().add_scalar("epoch_loss", values["epoch_loss"], step)  # its TensorBoard tracker

    class Run:  # wandb.sdk.wandb_run.Run: wandb.log is the run's log once wandb.init ran
        def log(self, data: dict, step: int | None = None) -> None: ...

    logged.patch_writer(types.SimpleNamespace(SummaryWriter=SummaryWriter), recorder)
    logged.patch_accelerator(types.SimpleNamespace(Accelerator=Accelerator), recorder)
    logged.patch_wandb(types.SimpleNamespace(Run=Run), recorder)
    SummaryWriter().add_scalar("val/acc", torch.tensor(0.75), 3)
    SummaryWriter().add_scalars("loss", {"train": 0.5, "name": "x"}, 3)
    Accelerator().log({"epoch_loss": 0.25, "flag": True}, step=2)
    Run().log({"val_acc": torch.tensor([0.5]), "image": torch.ones(3)})
    assert [line[:3] for line in recorder.lines] == [
        ("val/acc 0.75", "add_scalar", False), ("loss/train 0.5", "add_scalar", False),
        ("epoch_loss 0.25", "accelerator.log", True), ("val_acc 0.5", "wandb.log", False)]


def test_a_log_record_of_the_script_is_recorded_once_and_its_handlers_stdout_is_muted() -> None:
    recorder = StandIn()
    original = logging.Logger.callHandlers
    seen: list[bool] = []
    logger = logging.getLogger("accelify-test-values")
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(logged.muted())  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        logged.patch_logging(recorder)
        logger.handle(logger.makeRecord(logger.name, logging.INFO, SCRIPT, 12, "epoch %d acc %.3f", (1, 0.5), None))
        logger.handle(logger.makeRecord(logger.name, logging.INFO, "/elsewhere/lib.py", 3, "step %d", (4,), None))
    finally:
        logging.Logger.callHandlers = original  # type: ignore[method-assign]
        logger.removeHandler(handler)
    assert recorder.lines == [("epoch 1 acc 0.500", "logging", False, "train.py:12")]
    assert seen == [True, False] and not logged.muted()  # a library's record printed to stdout stays printed


def test_returns_of_the_scripts_functions_are_recorded_when_an_epoch_ran_inside_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HOOK_DIR))  # the hook modules import each other by top-level name
    recorder = StandIn()
    code = compile(
        "def evaluate(draw):\n"
        "    draw()\n"
        "    return 0.25, 3\n"
        "def helper():\n"
        "    return 1.5\n"
        "def shape(draw):\n"
        "    draw()\n"
        "    return [1.0] * 20\n", SCRIPT, "exec")
    space: dict[str, Any] = {}
    exec(code, space)

    def draw() -> None:  # a loader's whole epoch: tracing off while it runs, back on at its end
        tracer.epoch(True)
        recorder.draws += 1
        tracer.epoch(False)

    tracer = returns.Returns(recorder)
    before = sys.gettrace()
    try:
        tracer.start()
        space["evaluate"](draw)
        space["helper"]()
        space["shape"](draw)
    finally:
        sys.settrace(before)
    assert recorder.lines == [("evaluate() -> 0.25, 3.0", "return", False, "train.py:1")]


def test_a_function_called_while_tracing_was_off_is_traced_from_its_loops_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """``train_one_epoch`` on epoch 0 (before the first epoch's end started tracing), or an ``evaluate`` called inside
    a training epoch: the frames on the stack when a loader's epoch ends get the return tracer."""
    monkeypatch.syspath_prepend(str(HOOK_DIR))
    recorder = StandIn()
    space: dict[str, Any] = {}
    exec(compile("def train(draw):\n    draw()\n    return 0.5\n", SCRIPT, "exec"), space)
    tracer = returns.Returns(recorder)  # not started: the recorder leaves that to the first epoch's end

    def draw() -> None:
        tracer.epoch(True)
        recorder.draws += 1
        tracer.epoch(False)

    before = sys.gettrace()
    try:
        space["train"](draw)
    finally:
        sys.settrace(before)
    assert recorder.lines == [("train() -> 0.5", "return", False, "train.py:1")]


@pytest.mark.multiprocess
def test_exact_mode_marks_a_feature_dropout_inexact_only_where_it_draws() -> None:
    """``dropout2d`` draws its mask per process in exact mode (the step is marked inexact); ``Dropout2d(p=0.0)``
    draws nothing and was marked all the same (set W's W5: "same as original" skipped for a dropout that is off).
    In a process of its own: the patches stay for the life of the process, as in a verified run."""
    code = """
import types, torch
import torch.nn.functional as F
import accelify_verify_draws as draws
exact = types.SimpleNamespace(share=(4, 0, 2), inexact=set(), local=types.SimpleNamespace())
draws.patch_torch(torch, exact)
x = torch.ones(2, 3, 4, 4)
F.dropout2d(x, p=0.0)
torch.nn.Dropout2d(0.0)(x)
print(sorted(exact.inexact))
F.dropout2d(x, 0.5)
print(sorted(exact.inexact))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "['dropout2d draws its mask per process']"], done.stdout
