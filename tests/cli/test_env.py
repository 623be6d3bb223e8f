"""`accelify env`: everything a bug report needs, including the config file in use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from accelify import __version__
from accelify.cli import main


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith(("ACCELIFY_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))


def test_env_lists_versions_devices_and_config(tmp_path: Path, monkeypatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("num_processes: 2\nuse_cpu: true\n")
    monkeypatch.setenv("ACCELIFY_MIXED_PRECISION", "bf16")
    result = CliRunner().invoke(main, ["env", "--config_file", str(cfg)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.output
    for needle in (f"- accelify: {__version__}", f"- torch: {torch.__version__}", "- Python: 3.", "- platform: ",
                   "- CUDA available: ", "- NCCL: ", "- GPUs: ", "- Gloo backend: True",
                   "ACCELIFY_MIXED_PRECISION=bf16", f"- config file: {cfg}", "\t- num_processes: 2"):
        assert needle in out, needle


def test_env_without_config_and_with_a_broken_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["env"], catch_exceptions=False)
    assert result.exit_code == 0 and "- config file: none (defaults apply)" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("mixed_precision: fp64\n")
    result = CliRunner().invoke(main, ["env", "--config-file", str(bad)], catch_exceptions=False)
    assert result.exit_code == 0 and "invalid: " in result.output and "fp64" in result.output
