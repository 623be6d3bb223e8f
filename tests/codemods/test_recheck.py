"""A second look at a converted file reports the problems left to the user that are still there.

An already converted file is left unchanged, but the rules' ``recheck`` run over it: a warning a rule example
reports at conversion (a writer opened on every process, logging set up before the accelerator, an unseeded
draw, a gathered tensor shaped by the batch size) is reported again when its output is converted again, and
disappears once the code is fixed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from _convert import dedent

from accelify.codemods import codes
from accelify.codemods.rules import RULES
from accelify.pipeline import convert_source

RECHECKED = {code.code for code in (codes.SHARED_WRITER, codes.LOG_EVERY_PROCESS, codes.UNSEEDED_DRAWS, codes.GATHERED_SHAPE,
                                     codes.SHORT_BATCH)}
CASES = [
    (rule.name, example) for rule in RULES for example in rule.examples
    if any(w.split(":")[0] in RECHECKED for w in example.warnings)
]


@pytest.mark.parametrize(("rule", "example"), CASES, ids=[f"{name}-{i}" for i, (name, _) in enumerate(CASES)])
def test_a_warning_left_to_the_user_is_reported_again(rule: str, example: object) -> None:
    first = convert_source(example.source)  # type: ignore[attr-defined]
    again = convert_source(first.new)
    assert again.status == "unchanged" and again.new == first.new
    left = sorted(w.code for w in first.warnings if w.code in RECHECKED)
    assert sorted(w.code for w in again.warnings if w.code in RECHECKED) == left


def test_the_rechecked_codes_have_examples() -> None:
    assert {w.split(":")[0] for _, e in CASES for w in e.warnings} >= RECHECKED


WRITER = """\
import torch
from torch.utils.tensorboard import SummaryWriter
from accelify.runtime import Accelerator

def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    writer = {create}
    for x in torch.ones(4, 2):
        loss = model(x).sum()
        accelerator.backward(loss)
        optimizer.step()
        if writer is not None:
            writer.add_scalar("loss", loss.item())
"""


@pytest.mark.parametrize(
    "create, expected",
    [
        ('SummaryWriter("runs")', ["ACC024:10"]),
        ('SummaryWriter("runs") if accelerator.is_main_process else None', []),  # fixed: the warning goes
        ('SummaryWriter(f"runs/{accelerator.process_index}")', []),  # a file of its own on each process
    ],
)
def test_a_converted_writer(create: str, expected: list[str]) -> None:
    result = convert_source(WRITER.format(create=create))
    assert result.status == "unchanged" and result.reason == "already uses an Accelerator"
    assert [f"{w.code}:{w.line}" for w in result.warnings] == expected


def test_a_fixed_logging_set_up_is_quiet() -> None:
    code = dedent(
        """
        import logging
        import torch
        from accelify.runtime import Accelerator

        def main():
            accelerator = Accelerator()
            if accelerator.is_main_process:
                logging.basicConfig(filename="train.log")
            logging.basicConfig(level=logging.INFO if accelerator.is_local_main_process else logging.WARN)
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer = accelerator.prepare(model, optimizer)
        """
    )
    assert convert_source(code).warnings == ()


CORPUS = Path(__file__).resolve().parents[2] / "corpus"
LISTED = [d for d in sorted(CORPUS.glob("*/")) if (d / "expected.py").exists() and (d / "run.toml").exists()
          and any(w.split(":")[0] in RECHECKED for w in tomllib.loads((d / "run.toml").read_text()).get("warnings", []))]


@pytest.mark.parametrize("case", LISTED, ids=[d.name for d in LISTED])
def test_a_corpus_conversion_checked_again_reports_what_was_left(case: Path) -> None:
    """The conversion's warnings left to the user come back, at their lines in the converted file."""
    listed = sorted(w.split(":")[0] for w in tomllib.loads((case / "run.toml").read_text())["warnings"])
    again = convert_source((case / "expected.py").read_text())
    assert again.status == "unchanged"
    assert sorted(w.code for w in again.warnings if w.code in RECHECKED) == [c for c in listed if c in RECHECKED]
