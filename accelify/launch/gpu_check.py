"""``accelify test --gpu``: validate a GPU machine in one command, and say so in one summary.

It runs, from a source checkout (``pip install -e ".[test]"``), the GPU test suite (``pytest tests/gpu -m gpu``:
NCCL and DDP on every visible GPU, fp16 overflow, bf16, a real CUDA out-of-memory, checkpoints across devices,
FSDP2 and the converted corpus on 2 GPUs) and the CUDA step-overhead benchmark
(``benchmarks/step_overhead_cuda.py``: raw PyTorch vs accelify.runtime vs Hugging Face Accelerate), streaming
their output to stderr, and returns the rows of one summary. Without a visible GPU it refuses before
anything runs: a CPU machine must not look validated.

The pure parts are tested on the CPU with plain inputs: :func:`no_gpu_reason`, :func:`read_junit`,
:func:`summary_rows`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from accelify.errors import LaunchError

SUITE = "tests/gpu"
BENCHMARK = "benchmarks/step_overhead_cuda.py"


@dataclass(frozen=True)
class SuiteResult:
    """What pytest's JUnit report says: counts, each failed test with its first line, skips by reason."""

    passed: int = 0
    failed: tuple[tuple[str, str], ...] = ()  # (test id, first line of the failure)
    skipped: Mapping[str, int] = field(default_factory=dict)  # reason -> how many tests

    @property
    def total(self) -> int:
        return self.passed + len(self.failed) + sum(self.skipped.values())


@dataclass(frozen=True)
class GpuCheckOutcome:
    """The summary's rows ``(check, passed, detail)`` and the exit code (0 all passed, 1 something failed)."""

    rows: tuple[tuple[str, bool, str], ...]

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.rows)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def no_gpu_reason(gpu_count: int, cuda_build: str | None, visible_devices: str | None) -> str | None:
    """Why ``accelify test --gpu`` cannot run here, or None when a GPU is visible."""
    if gpu_count > 0:
        return None
    why = ["no GPU is visible here"]
    if not cuda_build:
        why.append("this torch is a CPU-only build (install a CUDA build of torch)")
    if visible_devices is not None and not visible_devices.strip():
        why.append("CUDA_VISIBLE_DEVICES is empty")
    return ("; ".join(why) + ". `accelify test --gpu` validates a GPU machine: run it on one. "
            "Nothing was run, and nothing is validated.")


def read_junit(text: str) -> SuiteResult:
    """The counts of a pytest ``--junitxml`` report."""
    root = ElementTree.fromstring(text)
    passed, failed, skipped = 0, [], Counter()
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skip = case.find("skipped")
        if problem is not None:
            message = (problem.get("message") or problem.text or "").strip().splitlines()
            failed.append((test_id, message[0] if message else "failed"))
        elif skip is not None:
            reason = (skip.get("message") or "skipped").strip()
            skipped[reason.removeprefix("Skipped: ")] += 1
        else:
            passed += 1
    return SuiteResult(passed, tuple(failed), dict(skipped))


def summary_rows(suite: SuiteResult | None, suite_problem: str, benchmark: Mapping[str, Any] | None,
                 benchmark_problem: str) -> tuple[tuple[str, bool, str], ...]:
    """The summary: the suite's counts, each failed test, and per benchmark model the ratios against the targets."""
    rows: list[tuple[str, bool, str]] = []
    if suite is None:
        rows.append(("GPU test suite", False, suite_problem or "no report was written"))
    else:
        skips = "; ".join(f"{n} skipped: {reason}" for reason, n in sorted(suite.skipped.items()))
        ok = not suite.failed and suite.passed > 0
        detail = f"{suite.passed} passed, {len(suite.failed)} failed" + (f"; {skips}" if skips else "")
        rows.append(("GPU test suite", ok, detail if suite.total else "no test ran"))
        rows += [(f"  {test_id}", False, message) for test_id, message in suite.failed]
    if benchmark is None:
        rows.append(("step overhead", False, benchmark_problem or "the benchmark wrote no results"))
        return tuple(rows)
    target = float(benchmark["targets"]["accelify"])
    low, high = benchmark["targets"]["accelerate_measured"]
    for row in benchmark["rows"]:
        ms = row["median_ms"]
        rows.append((f"step overhead, {row['model']}", row["accelify"] <= target,
                     f"accelify {row['accelify']:.3f}x raw PyTorch (target <= {target}); "
                     f"{ms['raw']:.3f} ms per raw step on {benchmark['device']}"))
        if "accelerate" in row:
            rows.append((f"  Hugging Face Accelerate, {row['model']}", True,
                         f"{row['accelerate']:.3f}x raw PyTorch, for comparison (measured elsewhere {low}-{high}x)"))
        else:
            rows.append((f"  Hugging Face Accelerate, {row['model']}", True, "not installed: not compared"))
    return tuple(rows)


def find_checkout() -> Path:
    """The source checkout this accelify runs from (it holds the GPU suite and the benchmark)."""
    import accelify

    for root in (Path(accelify.__file__).resolve().parents[1], Path.cwd()):
        if (root / SUITE).is_dir() and (root / BENCHMARK).is_file():
            return root
    raise LaunchError(
        f"`accelify test --gpu` runs the GPU suite ({SUITE}) and the benchmark ({BENCHMARK}) of a source checkout, "
        "and this accelify is installed without them: clone the repository, `pip install -e \".[test]\"` there, "
        "and run the command again."
    )


def _run(argv: list[str], root: Path) -> int:
    """Run ``argv`` in ``root`` with its output on stderr (the summary owns stdout)."""
    return subprocess.run(argv, cwd=root, stdout=sys.stderr, stderr=sys.stderr, check=False).returncode


def run_gpu_check() -> GpuCheckOutcome:
    """Refuse without a GPU; else run the suite and the benchmark and summarise them."""
    import os

    import torch

    from accelify.runtime.devices import read_device_facts

    reason = no_gpu_reason(read_device_facts().gpu_count, torch.version.cuda, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if reason is not None:
        raise LaunchError(reason)
    root = find_checkout()
    with tempfile.TemporaryDirectory(prefix="accelify-gpu-check-") as tmp:
        junit, results = Path(tmp) / "suite.xml", Path(tmp) / "benchmark.json"
        code = _run([sys.executable, "-m", "pytest", SUITE, "-m", "gpu", "-q", "-rfEs", "-p", "no:cacheprovider",
                     f"--junitxml={junit}"], root)
        suite = read_junit(junit.read_text(encoding="utf-8")) if junit.is_file() else None
        suite_problem = f"pytest exited {code} without a report (is pytest installed? pip install -e \".[test]\")"
        code = _run([sys.executable, BENCHMARK, "--json", str(results)], root)
        benchmark = json.loads(results.read_text(encoding="utf-8")) if code == 0 and results.is_file() else None
    return GpuCheckOutcome(summary_rows(suite, suite_problem, benchmark, f"{BENCHMARK} exited {code} (see above)"))
