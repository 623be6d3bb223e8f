"""`accelify test --gpu`: refuses without a GPU, summarises the GPU suite and the CUDA benchmark in one table.

On a machine without CUDA (CI), the command must say that no GPU is visible and exit non-zero; what it reads
from pytest's report and from the benchmark is checked with plain inputs, and the benchmark script itself runs
its CPU smoke mode so that the format the command reads is the one the script writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import accelify.launch.gpu_check as gpu_check
import accelify.runtime.devices as devices
from accelify.cli import main
from accelify.launch.gpu_check import (
    GpuCheckOutcome,
    SuiteResult,
    find_checkout,
    no_gpu_reason,
    read_junit,
    summary_rows,
)

ROOT = Path(__file__).resolve().parents[2]

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="2" tests="5"><testcase classname="tests.gpu.test_one_gpu" name="test_bf16_runs_the_inner_layers_in_bf16"
time="0.001" /><testcase classname="tests.gpu.test_one_gpu" name="test_fp16_overflow_skips_the_step_and_lowers_the_scale"
time="0.001" /><testcase classname="tests.gpu.test_one_gpu" name="test_a_real_cuda_out_of_memory_halves_the_batch"
time="0.2"><failure message="check 'out-of-memory halving' failed&#10;process 0: AssertionError: [1024, 512]">
trace</failure></testcase><testcase classname="tests.gpu.test_multi_gpu" name="test_fsdp2_on_two_gpus[bf16]"
time="0"><skipped type="pytest.skip" message="needs 2 GPUs; 1 visible">skip</skipped></testcase><testcase
classname="tests.gpu.test_multi_gpu" name="test_fsdp2_on_two_gpus[sharded by prepare]" time="0"><skipped
type="pytest.skip" message="needs 2 GPUs; 1 visible">skip</skipped></testcase></testsuite></testsuites>"""

BENCHMARK = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.13.0", "targets": {"accelify": 1.01,
             "accelerate_measured": [1.02, 1.15]},
             "rows": [{"model": "mlp", "median_ms": {"raw": 0.412, "accelify": 0.414, "accelerate": 0.451},
                       "accelify": 1.004, "accelerate": 1.094},
                      {"model": "transformer", "median_ms": {"raw": 4.1, "accelify": 4.2}, "accelify": 1.02}]}


def test_without_a_gpu_it_refuses_and_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "read_device_facts", lambda: devices.DeviceFacts())  # a machine without GPUs
    monkeypatch.setattr(gpu_check, "_run", lambda argv, root: pytest.fail(f"started {argv}"))
    result = CliRunner().invoke(main, ["test", "--gpu"], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no GPU is visible here") and "Nothing was run" in result.stderr
    assert "all checks passed" not in result.output


def test_the_reasons_it_gives() -> None:
    assert no_gpu_reason(1, "12.8", None) is None
    assert "CPU-only build" in no_gpu_reason(0, None, None)
    assert "CUDA_VISIBLE_DEVICES is empty" in no_gpu_reason(0, "12.8", "")
    assert "CPU-only" not in no_gpu_reason(0, "12.8", "")


def test_gpu_and_a_config_file_do_not_mix() -> None:
    result = CliRunner().invoke(main, ["test", "--gpu", "--config-file", "c.yaml"], catch_exceptions=False)
    assert result.exit_code == 2 and "drop --config-file" in result.stderr


def test_the_junit_report_is_counted() -> None:
    suite = read_junit(JUNIT)
    assert (suite.passed, suite.skipped, suite.total) == (2, {"needs 2 GPUs; 1 visible": 2}, 5)
    assert suite.failed == (("tests.gpu.test_one_gpu::test_a_real_cuda_out_of_memory_halves_the_batch",
                             "check 'out-of-memory halving' failed"),)


def test_the_summary_rows_and_the_verdict() -> None:
    rows = summary_rows(read_junit(JUNIT), "", BENCHMARK, "")
    by_name = {name: (ok, detail) for name, ok, detail in rows}
    assert by_name["GPU test suite"] == (False, "2 passed, 1 failed; 2 skipped: needs 2 GPUs; 1 visible")
    assert by_name["  tests.gpu.test_one_gpu::test_a_real_cuda_out_of_memory_halves_the_batch"][0] is False
    assert by_name["step overhead, mlp"] == (True, "accelify 1.004x raw PyTorch (target <= 1.01); 0.412 ms per raw "
                                                   "step on NVIDIA H100 80GB HBM3")
    assert by_name["step overhead, transformer"][0] is False  # 1.02 > 1.01: over the target is a failure
    assert "1.094x raw PyTorch, for comparison" in by_name["  Hugging Face Accelerate, mlp"][1]
    assert by_name["  Hugging Face Accelerate, transformer"] == (True, "not installed: not compared")
    assert GpuCheckOutcome(rows).exit_code == 1
    clean = summary_rows(SuiteResult(passed=40), "", {**BENCHMARK, "rows": BENCHMARK["rows"][:1]}, "")
    assert GpuCheckOutcome(clean).exit_code == 0
    missing = summary_rows(None, "pytest exited 4 without a report", None, "benchmarks/x.py exited 2")
    assert [ok for _, ok, _ in missing] == [False, False] and GpuCheckOutcome(missing).exit_code == 1
    assert summary_rows(SuiteResult(), "", None, "x")[0] == ("GPU test suite", False, "no test ran")


def test_the_command_prints_one_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = summary_rows(SuiteResult(passed=40, skipped={"needs 2 GPUs; 1 visible": 60}), "",
                        {**BENCHMARK, "rows": BENCHMARK["rows"][:1]}, "")
    monkeypatch.setattr(gpu_check, "run_gpu_check", lambda: GpuCheckOutcome(rows))
    result = CliRunner().invoke(main, ["test", "--gpu"], catch_exceptions=False, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "GPU test suite" in result.stdout and "step overhead, mlp" in result.stdout
    assert "all checks passed" in result.stdout


def test_the_checkout_holds_the_suite_and_the_benchmark() -> None:
    assert find_checkout() == ROOT


@pytest.mark.multiprocess
def test_the_benchmark_refuses_without_cuda_and_writes_what_the_command_reads(tmp_path: Path) -> None:
    script = ROOT / "benchmarks" / "step_overhead_cuda.py"
    if not __import__("torch").cuda.is_available():
        refused = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "no GPU is visible" in refused.stderr, refused.stderr
    out = tmp_path / "bench.json"
    smoke = subprocess.run([sys.executable, str(script), "--device", "cpu", "--models", "mlp", "--steps", "2",
                            "--rounds", "1", "--json", str(out)], capture_output=True, text=True, timeout=300,
                           cwd=ROOT)
    assert smoke.returncode == 0, smoke.stderr
    assert "mlp: accelify " in smoke.stdout and "smoke run, not a GPU measurement" in smoke.stdout
    results = json.loads(out.read_text())
    rows = {name: detail for name, _, detail in summary_rows(SuiteResult(passed=1), "", results, "")}
    assert "step overhead, mlp" in rows and "raw PyTorch" in rows["step overhead, mlp"]
