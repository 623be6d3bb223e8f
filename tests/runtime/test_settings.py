"""Where the runtime reads environment variables: settings.py and process_group.py, plus the two named exceptions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelify.runtime.errors import ConfigurationError
from accelify.runtime.process_group import declared_processes
from accelify.runtime.launch_settings import DURABLE_ENV, durable_checkpoints, log_level

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
# config.py locates the user's config file (ACCELERATE_CONFIG_FILE, XDG_CONFIG_HOME) and launch_session.py sets the
# variables of the processes it starts: neither reads a setting of the running process.
READERS = {"launch_settings.py", "process_group.py", "config.py", "launch_session.py"}


def test_only_the_named_modules_touch_the_environment() -> None:
    touching = {p.name for p in RUNTIME.rglob("*.py") if re.search(r"os\.environ|os\.getenv", p.read_text())}
    assert touching <= READERS, f"read environment variables through launch_settings.py / process_group.py: {touching - READERS}"


def test_log_level_and_durable_checkpoints_from_a_mapping() -> None:
    assert log_level({}) is None and log_level({"ACCELIFY_LOG_LEVEL": ""}) is None
    assert log_level({"ACCELERATE_LOG_LEVEL": "info"}) == ("info", "ACCELERATE_LOG_LEVEL")
    assert log_level({"ACCELERATE_LOG_LEVEL": "info", "ACCELIFY_LOG_LEVEL": "DEBUG"}) == ("DEBUG", "ACCELIFY_LOG_LEVEL")
    assert durable_checkpoints({}) is True and durable_checkpoints({DURABLE_ENV: " Off "}) is False
    with pytest.raises(ConfigurationError, match="ACCELIFY_DURABLE_CHECKPOINTS='2' is not valid; allowed: true or false"):
        durable_checkpoints({DURABLE_ENV: "2"})


def test_declared_processes_of_each_launcher() -> None:
    assert declared_processes({}) == ("WORLD_SIZE", 1, None)
    assert declared_processes({"WORLD_SIZE": "2", "RANK": "1"}) == ("WORLD_SIZE", 2, 1)
    assert declared_processes({"WORLD_SIZE": "2"}) == ("WORLD_SIZE", 2, None)  # unvalidated: no rank is not an error here
    assert declared_processes({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3"}) == ("SLURM_STEP_NUM_TASKS", 4, 3)
    assert declared_processes({"PMI_SIZE": "2", "PMI_RANK": "0"})[1:] == (2, 0)
    with pytest.raises(ConfigurationError, match="WORLD_SIZE='two'"):
        declared_processes({"WORLD_SIZE": "two"})
