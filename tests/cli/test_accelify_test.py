"""`accelify test --config_file path.yaml`: the bundled checks on 2 CPU processes, and failure rendering."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import accelify.launch.selftest as selftest
from accelify.cli import main
from accelify.launch.run import LaunchResult, WorkerFailure
from accelify.runtime.config import make_config, write_config

ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]


@pytest.mark.multiprocess
def test_checks_pass_on_two_cpu_processes(tmp_path: Path, clean_env) -> None:
    cfg = write_config(make_config(cpu=True, num_processes=2), tmp_path / "two_cpu.yaml")
    proc = subprocess.run([*ACCELIFY, "test", "--config_file", str(cfg)], capture_output=True, text=True,
                          timeout=180, env={**clean_env(None), "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("processes", "data sharding", "collectives", "gradient sync", "save on main only"):
        assert name in proc.stdout
    assert proc.stdout.count("passed") >= 5 and "all checks passed" in proc.stdout
    assert "2 processes x 1 machine, cpu (gloo)" in proc.stderr


def fake_outcome(checks, launch):
    return lambda plan: selftest.SelfTestOutcome(checks=tuple(checks), launch=launch)


def test_a_failing_check_is_named_and_exits_non_zero(monkeypatch, tmp_path: Path) -> None:
    cfg = write_config(make_config(cpu=True, num_processes=2), tmp_path / "c.yaml")
    checks = [selftest.CheckResult("processes", True, "2 process(es)"),
              selftest.CheckResult("gradient sync", False, "process 1: AssertionError: gradients differ")]
    monkeypatch.setattr(selftest, "run_checks", fake_outcome(checks, LaunchResult(exit_code=1)))
    result = CliRunner().invoke(main, ["test", "--config-file", str(cfg)], catch_exceptions=False)
    assert result.exit_code == 1
    assert "FAILED" in result.stdout and "check failed: gradient sync" in result.stdout
    assert "all checks passed" not in result.stdout


def test_a_crashed_check_script_shows_the_failing_rank(monkeypatch, tmp_path: Path) -> None:
    cfg = write_config(make_config(cpu=True, num_processes=2), tmp_path / "c.yaml")
    failure = WorkerFailure(rank=1, exit_code=1, message="ImportError: x", traceback_tail=("ImportError: x",))
    monkeypatch.setattr(selftest, "run_checks", fake_outcome([], LaunchResult(exit_code=1, failure=failure)))
    result = CliRunner().invoke(main, ["test", "--config_file", str(cfg)], catch_exceptions=False)
    assert result.exit_code == 1 and "did not finish" in result.stdout and "rank 1 failed first" in result.stdout


def test_invalid_config_is_an_error_before_launching(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("use_cpu: true\nmixed_precision: fp8\n")
    result = CliRunner().invoke(main, ["test", "--config_file", str(cfg)], catch_exceptions=False)
    assert result.exit_code == 2 and "mixed_precision='fp8' is not supported" in result.stderr
