"""Debug mode: the verdicts on per-process descriptors, call sites, and one 2-process launch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from accelify.runtime import debug
from accelify.runtime.debug import _pad_compatible, _verdict, call_site, named_operation, operation_name

WORKERS = Path(__file__).parent / "workers"


def desc(op: str, shapes, rule: str = "same", site: str = "train.py:1", dtypes=None) -> dict:
    return {"op": op, "site": site, "rule": rule, "shapes": shapes, "dtypes": dtypes}


def test_shape_mismatch_message_has_accelerates_form() -> None:
    message = _verdict([desc("accelify.runtime.broadcast", [1, 5]), desc("accelify.runtime.broadcast", [1, 2, 5])])
    assert message.startswith(
        "Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.\n\n"
        "Operation: `accelify.runtime.broadcast`\nInput shapes:\n  - Process 0: [1, 5]\n  - Process 1: [1, 2, 5]\n"
    )
    assert _verdict([desc("g", [2, 3]), desc("g", [2, 3])]) is None


def test_different_operations_name_each_process_and_site() -> None:
    message = _verdict([desc("accelify.runtime.gather", [1], site="a.py:3"), desc("wait_for_everyone", None, "none", "a.py:9")])
    assert "  - Process 0: `accelify.runtime.gather` at a.py:3\n  - Process 1: `wait_for_everyone` at a.py:9" in message


def test_dtype_mismatch_and_padding_rules() -> None:
    assert "dtype" in _verdict([desc("r", [2], dtypes="float32"), desc("r", [2], dtypes="float64")])
    assert _pad_compatible([[2, 3], [4, 3]], 0) and not _pad_compatible([[2, 3], [2, 4]], 0)
    assert _pad_compatible([{"a": [3, 1]}, {"a": [3, 5]}], -1) and not _pad_compatible([[2], [2, 1]], 0)
    assert _pad_compatible([[[1], [2]], [[3], [2]]], 0) and not _pad_compatible([[[1]], [[1], [2]]], 0)
    assert _verdict([desc("p", [2, 3], "pad:0"), desc("p", [5, 3], "pad:0")]) is None


def test_call_site_and_operation_names() -> None:
    line = sys._getframe().f_lineno + 1
    assert call_site().endswith(f"test_debug.py:{line}")
    assert operation_name("accelify.runtime.gather") == "accelify.runtime.gather"
    with named_operation("Accelerator.gather_for_metrics"):
        assert operation_name("accelify.runtime.gather") == "Accelerator.gather_for_metrics"


def test_checks_are_noops_with_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debug, "debug_enabled", lambda: pytest.fail("must not be consulted without a process group"))
    debug.check_collective("accelify.runtime.gather", torch.ones(1))
    debug.debug_checkpoint("wait_for_everyone")


@pytest.mark.multiprocess
def test_two_processes(run_distributed) -> None:
    proc = run_distributed(WORKERS / "debug_checks.py", env={"ACCELIFY_DEBUG_MODE": "1"}, timeout=120)
    assert proc.stdout.count("DEBUG-CHECKS-OK") == 2, proc.stdout + proc.stderr
    assert "DEBUG-TIMEOUT-OK" in proc.stdout, proc.stdout + proc.stderr
