"""``accelify verify``: the verdict table, the first failing check in words, the JSON report, the exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.console import make_console
from accelify.verify.report import FAILED, PASSED, CheckResult, VerifyOptions, VerifyReport
from accelify.console.verify import print_verify_report

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "tests" / "verify" / "planted"


@pytest.mark.multiprocess
def test_a_good_conversion_verifies_with_exit_0_and_the_report(tmp_path: Path) -> None:
    report = tmp_path / "verify.json"
    result = CliRunner().invoke(main, ["verify", str(ROOT / "corpus" / "mnist_style" / "input.py"), "--steps", "2",
                                       "--report", str(report), "--", "--epochs", "1"])
    assert result.exit_code == 0, result.output
    assert "verified: the conversion trains like the original" in result.output
    for name in ("same losses", "one process group", "model wrapped", "data sharded", "parameters agree"):
        assert name in result.output
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["passed"] is True and data["conversion"] == "converted"
    assert data["options"]["steps"] == 2 and data["options"]["args"] == ["--epochs", "1"]
    assert [run["label"] for run in data["runs"]] == ["original", "converted", "distributed"]
    assert data["runs"][2]["steps"] == [2, 2]


@pytest.mark.multiprocess
def test_a_wrong_conversion_fails_with_exit_1_and_says_what_it_means() -> None:
    case = PLANTED / "model_not_prepared"
    result = CliRunner().invoke(main, ["verify", str(case / "original.py"), "--converted", str(case / "converted.py"),
                                       "--steps", "3"])
    assert result.exit_code == 1, result.output
    assert "FAILED: model wrapped: process 0 never wrapped the model" in result.output
    assert "What it means: the 2 processes trained independent copies" in result.output


def test_a_script_the_tool_cannot_parse_fails_at_the_conversion(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import torch\ndef main(:\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["verify", str(script)])
    assert result.exit_code == 1, result.output
    assert "FAILED: conversion: the conversion failed:" in result.output and "syntax error" in result.output


def test_a_script_left_unchanged_is_not_verified(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text("import torch\nprint(torch.ones(2).sum())\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["verify", str(script)])
    assert result.exit_code == 1, result.output
    assert "not verified: conversion: the conversion left the script unchanged" in result.output


def test_a_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["verify", str(tmp_path / "nope.py")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_binary_script_is_an_error_without_a_traceback(tmp_path: Path) -> None:
    script = tmp_path / "blob.py"
    script.write_bytes(b"\x00\x01\x02torch")
    result = CliRunner().invoke(main, ["verify", str(script)])
    assert result.exit_code == 2 and result.output.startswith("error: ")
    assert "Traceback" not in result.output


def test_a_hang_is_shown_with_each_process_stack() -> None:
    stack = 'Current thread 0x1 (most recent call first):\n  File "/tmp/x/train.py", line 27 in main\n'
    hang = CheckResult("finished in time", "2 processes", FAILED, "the run did not finish within 40 s: process 0 "
                       "waits at train.py:27 in main: accelerator.wait_for_everyone()", "a hang: ...",
                       ((0, stack), (1, stack)))
    report = VerifyReport("train.py", "accelify convert", "converted", VerifyOptions(),
                          (CheckResult("conversion", "convert", PASSED, "converted (3 changes)"), hang))
    buffer = io.StringIO()
    print_verify_report(make_console(buffer), report)
    text = buffer.getvalue()
    assert "FAILED: finished in time: the run did not finish within 40 s" in text
    assert "Python stack of process 0 when it was ended:" in text and "Python stack of process 1" in text
    assert text.count('File "/tmp/x/train.py", line 27 in main') == 2
