"""A script runs under Hugging Face Accelerate 1.15 and under accelify.runtime with only the import changed.

``workers/hf_compat_api.py`` on 2 Gloo processes exercises the documented user-facing API under both
libraries side by side (threads; the subprocesses do the work); both must report the same results (exact
for integers, lists and strings, 1e-6 for floats) and the documented examples must come out as documented.
That converted scripts print the same under either library is checked for every corpus case
(``corpus/contract_example`` is the contract's own example) by ``tests/e2e``.

Deliberate differences between the libraries are listed in docs/ACCELERATE_DIFFERENCES.md.
"""

from __future__ import annotations

import json
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("accelerate", reason="Hugging Face Accelerate is not installed; nothing to compare against")

WORKER = Path(__file__).parent / "workers" / "hf_compat_api.py"
MARKER = "HF_COMPAT_RESULT"
LIBS = ("accelify", "accelerate")
IMPORT_LINE = "from accelify.runtime import Accelerator"


def _both(fn: Callable[[str], Any]) -> dict[str, Any]:
    """Run ``fn(lib)`` for both libraries at once; a failure in either fails the test."""
    with ThreadPoolExecutor(max_workers=len(LIBS)) as pool:
        futures = {lib: pool.submit(fn, lib) for lib in LIBS}
        return {lib: future.result() for lib, future in futures.items()}


def _assert_same(ours: Any, theirs: Any, where: str = "result") -> None:
    """Equal field by field: floats within 1e-6, everything else exactly (bools are not numbers here)."""
    if isinstance(ours, float) or isinstance(theirs, float):
        assert isinstance(ours, (int, float)) and isinstance(theirs, (int, float)), f"{where}: {ours!r} vs {theirs!r}"
        assert math.isclose(ours, theirs, rel_tol=0, abs_tol=1e-6), f"{where}: accelify {ours!r}, accelerate {theirs!r}"
    elif isinstance(ours, dict):
        assert isinstance(theirs, dict) and sorted(ours) == sorted(theirs), f"{where}: keys {sorted(ours)} vs {theirs!r}"
        for key in ours:
            _assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(ours, list):
        assert isinstance(theirs, list) and len(ours) == len(theirs), f"{where}: accelify {ours!r}, accelerate {theirs!r}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _assert_same(a, b, f"{where}[{i}]")
    else:
        assert type(ours) is type(theirs) and ours == theirs, f"{where}: accelify {ours!r}, accelerate {theirs!r}"


def _result(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER + " ")]
    assert len(lines) == 1, f"expected one {MARKER} line (rank 0 only):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[0][len(MARKER) + 1 :])


def test_helper_compares_strictly() -> None:
    """The comparison the tests rely on catches differences in value, type, length and keys."""
    _assert_same({"a": [1, 2.0, "x", True]}, {"a": [1, 2.0 + 1e-9, "x", True]})
    for ours, theirs in [(1, 2), (1.0, 1.001), ([1], [1, 1]), ({"a": 1}, {"b": 1}), (True, 1), ("1", 1)]:
        with pytest.raises(AssertionError):
            _assert_same(ours, theirs)


@pytest.mark.multiprocess
def test_api_matches_accelerate(run_distributed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """2 Gloo processes per library: prepare, sharding, collectives, training, accumulation, coordination."""

    def launch(lib: str) -> subprocess.CompletedProcess:
        out = tmp_path / lib
        out.mkdir()
        return run_distributed(WORKER, "--lib", lib, "--out", str(out))

    procs = _both(launch)
    for lib, proc in procs.items():
        assert proc.stdout.count("HF_COMPAT_PRINT_ONCE") == 1, f"{lib}: accelerator.print is once per machine\n{proc.stdout}"
    ours, theirs = _result(procs["accelify"]), _result(procs["accelerate"])
    _assert_same(ours, theirs)

    # and the documented semantics themselves (so two libraries agreeing on a wrong answer still fails)
    assert ours["num_processes"] == 2 and ours["distributed_type"] == "MULTI_CPU" and ours["device_type"] == "cpu"
    assert ours["is_main_process"] == [True, False] and ours["is_last_process"] == [False, True]
    assert ours["batches_bs2"] == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]
    assert ours["batches_bs3"] == [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9, 0, 1]]]
    assert ours["len_bs2"] == [3, 3] and ours["len_bs3"] == [2, 2]
    for bs in (2, 3):
        assert ours[f"gather_bs{bs}"] == list(range(10)) + [0, 1]  # plain gather keeps the duplicates
        assert ours[f"gather_for_metrics_bs{bs}"] == list(range(10))  # exactly 10 samples back
        assert ours[f"gather_for_metrics_objects_bs{bs}"] == [f"s{i}" for i in range(10)]
    assert ours["gather"] == [1.0, 10.0, 2.0, 20.0] and ours["gather_scalar"] == [5, 6]
    assert ours["reduce_sum"] == [3.0, 30.0] and ours["reduce_mean"] == [1.5, 15.0]
    assert ours["pad"] == [1, 2, 0, 1, 2, 3] and ours["pad_first"] == [-1, 1, 2, 1, 2, 3]
    assert ours["split"] == [[0, 1, 2], [3, 4]] and ours["split_padded"] == [[0, 1, 2], [3, 4, 4]]
    assert ours["trigger"] == [True, False]  # set on process 1, seen by all, reset by the check
    assert ours["saved_files"] == ["model_0.pt"]  # accelerator.save writes on the main process only
    assert ours["unwrap_type"] == "Linear"
    # StepLR(step_size=2) stepped num_processes times per call: the lr halves on every call
    assert ours["train_lrs"] == pytest.approx([0.05, 0.025, 0.0125, 0.00625])
    # accumulation: 6 batches, 2 per step -> sync on 2, 4, 6; the schedule moves only when the optimizer steps
    assert ours["acc_sync_gradients"] == [False, True, False, True, False, True]
    sums = ours["acc_weight_sums"]
    assert sums[1] == sums[2] and sums[3] == sums[4] and len(set(sums)) == 4, sums
    assert ours["acc_lrs"] == pytest.approx([0.1, 0.05, 0.05, 0.025, 0.025, 0.0125])
