"""`accelify config` (questionnaire), `config default` and `config show`, through CliRunner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import accelify.cli.config as config_cli
from accelify.cli import main
from accelify.runtime.config import load_config


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(os.environ):
        if key.startswith(("ACCELIFY_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(config_cli, "_visible_gpus", lambda: 0)
    return tmp_path


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["config", *args], input=input, catch_exceptions=False)


def test_questionnaire_defaults_write_a_cpu_config(home: Path) -> None:
    result = run(input="\n" * 8)
    assert result.exit_code == 0, result.output
    path = home / "accelify" / "config.yaml"
    assert f"Configuration written to {path}" in result.output
    loaded = load_config(path)
    assert (loaded.use_cpu, loaded.num_processes, loaded.mixed_precision, loaded.distributed_type) == \
        (True, 1, "no", "NO")


def test_questionnaire_validates_and_writes_multi_machine(home: Path, monkeypatch) -> None:
    monkeypatch.setattr(config_cli, "_visible_gpus", lambda: 2)
    target = home / "out.yaml"
    # GPUs, ids "0,x" and "0,7" (rejected) then 0,1, 2 machines, rank 5 (rejected) then 1, ip "" (rejected) then
    # 10.0.0.2, port, c10d, 4 processes, "fp8" (rejected), bf16
    answers = ["n", "0,x", "0,7", "0,1", "2", "5", "1", "", "10.0.0.2", "", "c10d", "4", "fp8", "bf16", "n", "y"]
    result = run("--config-file", str(target), input="\n".join(answers) + "\n")
    assert result.exit_code == 0, result.output
    assert "Please enter a number from 0 to 1" in result.output
    assert "gpu_ids='0,x' is not valid" in result.output and "This machine has 2 GPU(s)" in result.output
    assert "main_process_ip='' is not valid" in result.output
    data = yaml.safe_load(target.read_text())
    assert data == {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", "num_processes": 4,
        "num_machines": 2, "machine_rank": 1, "use_cpu": False, "mixed_precision": "bf16", "debug": True,
        "rdzv_backend": "c10d", "gpu_ids": "0,1", "main_process_ip": "10.0.0.2", "main_process_port": 29500,
        "same_network": True,
    }


def test_default_writes_once_and_show_prints_it(home: Path) -> None:
    result = run("default", "--mixed_precision", "bf16")
    assert result.exit_code == 0, result.output
    path = home / "accelify" / "config.yaml"
    assert load_config(path).mixed_precision == "bf16"
    again = run("default")
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr
    assert run("default", "--force").exit_code == 0 and load_config(path).mixed_precision == "no"
    shown = run("show")
    assert shown.exit_code == 0 and shown.output.startswith(f"# {path}\n") and "use_cpu: true" in shown.output


def test_show_follows_environment_and_reports_problems(home: Path, monkeypatch) -> None:
    assert "No config file in use" in run("show").output
    hf = home / "default_config.yaml"
    hf.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_processes: 2\nfoo: 1\n")
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(hf))
    shown = run("show")
    assert shown.exit_code == 0 and f"# {hf}" in shown.output and "unknown key 'foo'" in shown.stderr
    hf.write_text("num_machines: 0\n")
    bad = run("show")
    assert bad.exit_code == 2 and "num_machines=0 is not valid" in bad.stderr


def test_interrupted_questionnaire_writes_nothing(home: Path) -> None:
    result = run(input="n\n")  # input ends before the questions do
    assert result.exit_code == 1 and "nothing was written" in result.stderr
    assert not (home / "accelify" / "config.yaml").exists()
