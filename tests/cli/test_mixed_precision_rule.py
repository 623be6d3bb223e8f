"""Every entry point applies the one mixed-precision rule of ``accelify.runtime.precision_rules``.

The rule: fp16 and bf16 run wherever torch's autocast runs them, the CPU included; where it does not,
every entry point refuses with the same error (never a silent fp32 run). Before, ``accelify launch
--cpu --mixed-precision fp16`` was refused while ``ACCELIFY_MIXED_PRECISION=fp16 python train.py`` ran.
Each entry point below is driven the way a user drives it; nothing is launched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml
from click.testing import CliRunner

import accelify.cli.config as config_cli
import accelify.launch.plan as launch_plan
import accelify.launch.run as launcher
import accelify.launch.selftest as selftest
import accelify.runtime.launch as notebook
import accelify.runtime.precision_rules as settings
from accelify.cli import main
from accelify.runtime import Accelerator
from accelify.runtime.config import basic_config, load_config, write_config
from accelify.runtime.launch_settings import load_launch_settings

RULE = "mixed_precision='fp16' is not supported on the cpu device"
ADVICE = "Use mixed_precision='bf16' or 'no' on the CPU, or run on a GPU."


class Refused(Exception):
    """An entry point said no; the message is what the user saw."""


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(os.environ):
        if key.startswith(("ACCELIFY_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(launch_plan, "_visible_gpus", lambda: 0)  # a CPU-only machine, whatever runs the test
    monkeypatch.setattr(config_cli, "_visible_gpus", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(launcher, "check_script", lambda plan: None)
    return tmp_path


def _cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    """Run ``accelify launch ARGS s.py`` with the start replaced; the plan's mixed precision."""
    plans: list = []
    monkeypatch.setattr(launcher, "execute", lambda plan: plans.append(plan) or launcher.LaunchResult(exit_code=0))
    result = CliRunner().invoke(main, ["launch", *args, "s.py"], catch_exceptions=False)
    if result.exit_code:
        raise Refused(result.stderr)
    return plans[0].settings.mixed_precision


def _cpu_config(path: Path) -> Path:
    path.write_text(yaml.safe_dump({"use_cpu": True, "num_processes": 2, "mixed_precision": "fp16"}))
    return path


def _catch(function: Callable[[], str]) -> str:
    try:
        return function()
    except Exception as exc:  # ConfigurationError from the runtime, LaunchError from the tool
        raise Refused(str(exc)) from exc


def _questionnaire(home: Path) -> str:
    # CPU only, 1 machine, 1 process, then "fp16"; if refused, the prompt asks again and gets "no"
    answers = ["y", "1", "1", "fp16", "no", "n", "n"]
    result = CliRunner().invoke(main, ["config", "--config-file", str(home / "q.yaml")],
                                input="\n".join(answers) + "\n", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    chosen = load_config(home / "q.yaml").mixed_precision
    if chosen != "fp16":
        raise Refused(result.output)
    return chosen


def _notebook_launcher() -> str:
    return notebook.notebook_launcher(lambda: load_launch_settings().mixed_precision, num_processes=1,
                                      mixed_precision="fp16")


ENTRY_POINTS: dict[str, Callable[[pytest.MonkeyPatch, Path], str]] = {
    "accelify launch --cpu --mixed-precision fp16": lambda mp, home: _cli(mp, "--cpu", "--mixed-precision", "fp16"),
    "accelify launch --config-file (use_cpu, fp16)": lambda mp, home: _cli(
        mp, "--config-file", str(_cpu_config(home / "launch.yaml"))),
    "ACCELIFY_MIXED_PRECISION=fp16 accelify launch --cpu": lambda mp, home: (
        mp.setenv("ACCELIFY_MIXED_PRECISION", "fp16"), _cli(mp, "--cpu"))[1],
    "accelify test --config-file (use_cpu, fp16)": lambda mp, home: _catch(
        lambda: selftest.plan_checks(str(_cpu_config(home / "test.yaml"))).settings.mixed_precision),
    "accelify config default --mixed-precision fp16": lambda mp, home: _catch(
        lambda: load_config(write_config(basic_config("fp16", gpu_count=0), home / "d.yaml")).mixed_precision),
    "accelify config (questionnaire)": lambda mp, home: _questionnaire(home),
    "ACCELIFY_MIXED_PRECISION=fp16 python train.py": lambda mp, home: (
        mp.setenv("ACCELIFY_MIXED_PRECISION", "fp16"), _catch(lambda: Accelerator(cpu=True).mixed_precision))[1],
    "notebook_launcher(mixed_precision='fp16') on CPU": lambda mp, home: _catch(_notebook_launcher),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_fp16_on_cpu_runs_from_every_entry_point(entry: str, env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert ENTRY_POINTS[entry](monkeypatch, env) == "fp16"


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_every_entry_point_refuses_what_the_rule_refuses(entry: str, env: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose CPU autocast cannot run fp16: the same refusal everywhere, not fp32 under an fp16 label."""
    real = settings.autocast_supports
    monkeypatch.setattr(settings, "autocast_supports",
                        lambda device, precision: precision != "fp16" and real(device, precision))
    with pytest.raises(Refused) as refused:
        ENTRY_POINTS[entry](monkeypatch, env)
    if entry == "accelify config (questionnaire)":
        assert "Please select one of the available options" in str(refused.value)  # fp16 is not offered
        assert "fp16" not in str(refused.value).split("Mixed precision?")[1].split("]")[0]
    else:
        assert RULE in str(refused.value) and ADVICE in str(refused.value)


def test_the_choices_have_one_owner() -> None:
    """click's choices, the config file's and the runtime's are the settings module's tuple."""
    from accelify.cli.launch import launch

    option = next(p for p in launch.params if p.name == "mixed_precision")
    assert tuple(option.type.choices) == settings.MIXED_PRECISION_CHOICES
    assert settings.mixed_precision_choices("cpu") == settings.MIXED_PRECISION_CHOICES  # torch >= 2.4 runs all


def test_a_launcher_leaves_the_gpu_checks_to_each_process(env: Path) -> None:
    """With GPUs the plan takes fp16 and bf16 without touching them (no CUDA here: nothing is probed);
    each process's Accelerator checks its own GPU (bf16 support) when it starts."""
    for precision in settings.MIXED_PRECISION_CHOICES:
        plan = launch_plan.resolve_plan(launch_plan.LaunchOptions(script="s.py", mixed_precision=precision), gpu_count=2)
        assert (plan.device, plan.settings.mixed_precision) == ("cuda", precision)
    assert settings.mixed_precision_choices("cuda") == settings.MIXED_PRECISION_CHOICES
