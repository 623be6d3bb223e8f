"""The one launch helper `accelify launch` and `notebook_launcher` share: launch file, environment, restore."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import yaml

from accelify.runtime.launch_session import launch_session
from accelify.runtime.launch_settings import LAUNCH_CONFIG_VAR
from accelify.runtime.launch_settings import LaunchSettings as Settings
from accelify.runtime.launch_settings import load_launch_settings as load_settings


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (LAUNCH_CONFIG_VAR, "OMP_NUM_THREADS", "EXTRA", "SET_BY_FUNCTION", "PYTHONHASHSEED"):
        monkeypatch.delenv(key, raising=False)


def test_settings_reach_the_processes_and_everything_is_put_back(clean: None) -> None:
    before = dict(os.environ)
    sigterm = signal.getsignal(signal.SIGTERM)
    with launch_session(Settings(mixed_precision="bf16", debug=True), {"EXTRA": "1"}, processes=2) as path:
        assert os.environ[LAUNCH_CONFIG_VAR] == path and os.environ["EXTRA"] == "1"
        assert os.environ["OMP_NUM_THREADS"] == "1"  # several processes: one thread each unless the user said
        assert os.environ["PYTHONHASHSEED"] == "0"  # one string hash order for every process (a set's order)
        assert yaml.safe_load(Path(path).read_text()) == {"mixed_precision": "bf16", "debug": True}
        assert load_settings().mixed_precision == "bf16"
        os.environ["ADDED_BY_ELASTIC"] = "x"  # what torch elastic may leave behind
        signal.signal(signal.SIGTERM, lambda *a: None)  # as torch elastic does
    assert dict(os.environ) == before and signal.getsignal(signal.SIGTERM) is sigterm
    assert not Path(path).exists()


def test_one_process_in_this_process_keeps_what_the_function_set(clean: None, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with pytest.raises(KeyError):
        with launch_session(Settings(), restore_all=False) as path:
            assert os.environ["OMP_NUM_THREADS"] == "3"  # the user's value, and one process: untouched
            os.environ["SET_BY_FUNCTION"] = "kept"
            raise KeyError("the function failed")
    assert os.environ.pop("SET_BY_FUNCTION") == "kept"
    assert LAUNCH_CONFIG_VAR not in os.environ and not Path(path).exists()


def test_the_users_hash_seed_is_kept(clean: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Near miss: a ``PYTHONHASHSEED`` the user set is the one every process gets."""
    monkeypatch.setenv("PYTHONHASHSEED", "123")
    with launch_session(Settings(), processes=2):
        assert os.environ["PYTHONHASHSEED"] == "123"
