"""One launch-option table drives `accelify launch`'s options, the config file's checks and the launch plan.

Each rule that used to be written in several places is asked here from every place that applies it, and must
answer with the same words: the rendezvous choices, ``gradient_accumulation_steps >= 1``, the port and the
machine-rank bounds. Nothing is launched.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

import accelify.launch.plan as launch_plan
import accelify.launch.run as launcher
from accelify.cli import main
from accelify.cli.launch import launch
from accelify.errors import LaunchError
from accelify.launch.plan import LaunchOptions, resolve_plan
from accelify.runtime import Accelerator
from accelify.runtime.config import parse_config
from accelify.runtime.errors import ConfigurationError
from accelify.runtime.launch_options import (
    COMMAND_LINE,
    LAUNCH_OPTIONS,
    OPTIONS,
    RDZV_BACKENDS,
    SETTINGS,
    check_machine_rank,
)
from accelify.runtime.launch_settings import (
    LAUNCH_CONFIG_VAR,
    LaunchSettings,
    forget_launch_settings,
    load_launch_settings,
)

NOT_OPTIONS = {"script", "script_args", "module", "config_file"}  # the command's own arguments


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(os.environ):
        if key.startswith(("ACCELIFY_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(launch_plan, "_visible_gpus", lambda: 0)
    monkeypatch.setattr(launcher, "check_script", lambda plan: None)
    monkeypatch.setattr(launcher, "execute", lambda plan: launcher.LaunchResult(exit_code=0))
    forget_launch_settings()
    return tmp_path


def _refusal(*args: str) -> str:
    result = CliRunner().invoke(main, ["launch", *args, "s.py"], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    return result.stderr


def test_the_command_line_options_are_the_tables() -> None:
    params = {p.name: p for p in launch.params if isinstance(p, click.Option)}
    for option in COMMAND_LINE:
        param = params.pop(option.name)
        assert tuple(param.opts + param.secondary_opts) == option.cli_flags, option.name
        assert param.help == option.help and param.default is None
        if option.kind == "choice":
            assert tuple(param.type.choices) == option.choices
        assert param.is_flag == (option.kind == "flag")
    assert set(params) == {"config_file", "module", "quiet"}  # the command's own, not launch settings
    fields = {f.name for f in dataclasses.fields(LaunchOptions)}
    assert fields - NOT_OPTIONS == {o.name for o in COMMAND_LINE}
    assert {o.name for o in SETTINGS} | {"fsdp_config"} == {f.name for f in dataclasses.fields(LaunchSettings)}


def test_every_hugging_face_spelling_is_accepted(env: Path) -> None:
    """``accelerate launch``'s spelling of each option (on a CPU machine: the GPU-only ones are left out)."""
    given = {"num_processes": ["2"], "num_machines": ["2", "--main_process_ip", "h"], "main_process_ip": ["h"],
             "machine_rank": ["1", "--num_machines", "2", "--main_process_ip", "h"], "main_process_port": ["29511"],
             "mixed_precision": ["bf16"], "gradient_accumulation_steps": ["2"], "max_restarts": ["1"],
             "monitor_interval": ["0.5"], "rdzv_backend": ["c10d"], "cpu": [], "debug": [], "use_fsdp": []}
    assert set(given) | {"multi_gpu", "gpu_ids"} == {o.name for o in COMMAND_LINE}
    for name, rest in given.items():
        option = OPTIONS[name]
        assert option.hf_flag == "--" + name or name == "cpu" and option.hf_flag == "--cpu"
        result = CliRunner().invoke(main, ["launch", "--cpu", option.hf_flag, *rest, "s.py"], catch_exceptions=False)
        assert result.exit_code == 0, (name, result.output)


def test_rendezvous_choices_are_one_list(env: Path) -> None:
    assert OPTIONS["rdzv_backend"].choices == RDZV_BACKENDS == ("static", "c10d")
    with pytest.raises(ConfigurationError, match="rdzv_backend='etcd' is not supported; allowed: static, c10d"):
        parse_config({"rdzv_backend": "etcd"}, "cfg.yaml")
    assert "'etcd' is not one of 'static', 'c10d'" in CliRunner().invoke(
        main, ["launch", "--rdzv-backend", "etcd", "s.py"]).output


def test_gradient_accumulation_steps_is_checked_once_with_one_message(env: Path, monkeypatch) -> None:
    said = "gradient_accumulation_steps=0 is not valid; allowed: a whole number >= 1."
    assert ("command line: --gradient-accumulation-steps=0 is not valid; allowed: a whole number >= 1."
            in _refusal("--cpu", "--gradient-accumulation-steps", "0"))
    with pytest.raises(ConfigurationError, match=f"^cfg.yaml: {said}"):
        parse_config({"gradient_accumulation_steps": 0}, "cfg.yaml")
    with pytest.raises(ConfigurationError, match="^ACCELIFY_GRADIENT_ACCUMULATION_STEPS: " + said.replace("=0", "='0'")):
        load_launch_settings({"ACCELIFY_GRADIENT_ACCUMULATION_STEPS": "0"})
    launch_file = env / "launch.yaml"
    launch_file.write_text("gradient_accumulation_steps: 0\n")
    with pytest.raises(ConfigurationError, match=f"^{launch_file}: {said}"):
        load_launch_settings({LAUNCH_CONFIG_VAR: str(launch_file)})
    with pytest.raises(ConfigurationError, match=f"^Accelerator: {said}"):
        Accelerator(cpu=True, gradient_accumulation_steps=0)


def test_port_bounds_are_one_rule(env: Path) -> None:
    allowed = "is not valid; allowed: a whole number >= 0 and <= 65535."
    assert f"command line: --main-process-port=70000 {allowed}" in _refusal("--cpu", "--main-process-port", "70000")
    with pytest.raises(ConfigurationError, match=f"^cfg.yaml: main_process_port=70000 {allowed}"):
        parse_config({"main_process_port": 70000}, "cfg.yaml")
    assert "command line: --main-process-port=-1 " in _refusal("--cpu", "--main-process-port", "-1")


def test_machine_rank_bounds_are_one_rule(env: Path) -> None:
    said = "machine_rank=2 is not valid with num_machines=2; use 0 to 1."
    assert f"command line: {said}" in _refusal("--cpu", "--num-machines", "2", "--machine-rank", "2",
                                               "--main-process-ip", "h")
    with pytest.raises(ConfigurationError, match=f"^cfg.yaml: {said}"):
        parse_config({"num_machines": 2, "machine_rank": 2}, "cfg.yaml")
    config = env / "ranks.yaml"
    config.write_text(yaml.safe_dump({"num_machines": 2, "use_cpu": True, "main_process_ip": "h"}))
    with pytest.raises(LaunchError, match="^command line: machine_rank=5 is not valid with num_machines=2"):
        resolve_plan(LaunchOptions(script="s.py", config_file=str(config), machine_rank=5))
    assert check_machine_rank(0, 1, "x") == 0


def test_each_option_checks_its_config_value_as_on_the_command_line() -> None:
    """A bad value gets the same words from the config file as from the table itself (where and key aside)."""
    bad = {"int": -7, "float": 0, "str": "", "flag": "maybe", "choice": "nope", "mapping": "x"}
    for option in LAUNCH_OPTIONS:
        if not option.config_key:
            continue
        value = "0,x" if option.name == "gpu_ids" else bad[option.kind]
        with pytest.raises(ConfigurationError) as from_file:
            parse_config({option.config_key: value}, "f.yaml")
        with pytest.raises(ConfigurationError) as from_table:
            option.validate(value, "f.yaml")
        assert str(from_file.value) == str(from_table.value), option.name


def test_the_launch_file_is_read_once_per_process(tmp_path: Path) -> None:
    launch_file = tmp_path / "launch.yaml"
    launch_file.write_text("mixed_precision: bf16\n")
    env = {LAUNCH_CONFIG_VAR: str(launch_file)}
    forget_launch_settings()
    assert load_launch_settings(env).mixed_precision == "bf16"
    launch_file.write_text("mixed_precision: fp16\n")  # a worker's file never changes; here it does
    assert load_launch_settings(env).mixed_precision == "bf16"  # not read again
    launch_file.unlink()
    assert load_launch_settings(env).mixed_precision == "bf16"
    assert load_launch_settings({**env, "ACCELIFY_DEBUG_MODE": "1"}).debug is True  # variables: read at each call
    forget_launch_settings()  # what a test that rewrites the file calls
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_launch_settings(env)
    launch_file.write_text("mixed_precision: fp16\n")
    assert load_launch_settings(env).mixed_precision == "fp16"
    forget_launch_settings()
