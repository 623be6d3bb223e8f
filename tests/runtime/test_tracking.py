"""Trackers: JSONL output, log_with validation, custom GeneralTracker, main-process-only, end_training."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from accelify.runtime.checkpoint import ProjectConfiguration
from accelify.runtime.errors import ConfigurationError
from accelify.runtime import tracking
from accelify.runtime.tracking import GeneralTracker, JSONLTracker, available_trackers, filter_trackers


class FakeAccelerator:
    """Calls tracking.py as Accelerator does (what it passes: docs/INTERNALS.md), on a fake process state."""

    def __init__(self, log_with: Any, project_dir: Path | None, main: bool = True) -> None:
        self.log_with = log_with
        self.project_configuration = ProjectConfiguration(project_dir=None if project_dir is None else str(project_dir))
        self.state = SimpleNamespace(is_main_process=main, destroyed=0)
        self.state.destroy_process_group = lambda: setattr(self.state, "destroyed", self.state.destroyed + 1)
        self.barriers = 0
        self.trackers: list[GeneralTracker] = []

    def wait_for_everyone(self) -> None:
        self.barriers += 1

    def init_trackers(self, project_name: str, config: Any = None, init_kwargs: Any = None) -> None:
        self.trackers = self.trackers + tracking.start_trackers(
            self.log_with, project_name, self.project_configuration.logging_dir,
            is_main_process=self.state.is_main_process, config=config, init_kwargs=init_kwargs)

    def log(self, values: dict[str, Any], step: int | None = None, log_kwargs: Any = None) -> None:
        tracking.log_to(self.trackers, values, is_main_process=self.state.is_main_process, step=step,
                        log_kwargs=log_kwargs)

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        return tracking.find_tracker(self.trackers, name, unwrap)

    def end_training(self) -> None:
        tracking.finish_trackers(self.trackers, is_main_process=self.state.is_main_process)
        self.wait_for_everyone()


class RecordingTracker(GeneralTracker):
    name = "recording"
    requires_logging_directory = False

    def __init__(self, main_only: bool = True) -> None:
        super().__init__()
        self.main_process_only = main_only
        self.calls: list[tuple[Any, ...]] = []

    @property
    def tracker(self) -> list[tuple[Any, ...]]:
        return self.calls

    def start(self) -> None:
        self.calls.append(("start",))

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.calls.append(("config", values))

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.calls.append(("log", values, step, kwargs))

    def finish(self) -> None:
        self.calls.append(("finish",))


def test_jsonl_tracker_writes_one_object_per_log_and_the_config(tmp_path: Path) -> None:
    acc = FakeAccelerator("jsonl", tmp_path)
    acc.init_trackers("run1", config={"lr": 1e-3, "batch_size": 32, "path": tmp_path})
    acc.log({"loss": torch.tensor(0.5), "acc": 0.25, "name": "x"}, step=1)
    acc.log({"loss": float("nan")}, step=2)
    acc.end_training()
    lines = (tmp_path / "run1" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["step"], r["loss"]) for r in records] == [(1, 0.5), (2, "nan")]
    assert records[0]["acc"] == 0.25 and records[0]["name"] == "x" and "_time" in records[0]
    config = json.loads((tmp_path / "run1" / "config.json").read_text())
    assert config == {"lr": 1e-3, "batch_size": 32, "path": str(tmp_path)}
    assert acc.barriers == 1 and acc.state.destroyed == 0  # the group stays up for the DDP models
    tracker = acc.get_tracker("jsonl")
    assert isinstance(tracker, JSONLTracker) and tracker.tracker is None  # closed by end_training


def test_logging_dir_overrides_project_dir(tmp_path: Path) -> None:
    acc = FakeAccelerator("jsonl", tmp_path / "proj")
    acc.project_configuration = ProjectConfiguration(project_dir=str(tmp_path / "proj"), logging_dir=str(tmp_path / "logs"))
    acc.init_trackers("r")
    acc.log({"a": 1})
    acc.end_training()
    assert (tmp_path / "logs" / "r" / "metrics.jsonl").is_file()
    assert not (tmp_path / "proj").exists()


def test_non_main_process_writes_nothing(tmp_path: Path) -> None:
    acc = FakeAccelerator(["jsonl"], tmp_path, main=False)
    acc.init_trackers("r", config={"a": 1})
    acc.log({"loss": 1.0}, step=0)
    acc.end_training()
    assert not (tmp_path / "r").exists()
    assert acc.barriers == 1


def test_end_training_without_trackers_still_waits() -> None:
    acc = FakeAccelerator(None, None)
    acc.log({"loss": 1.0})  # no trackers: nothing to do, no error
    acc.end_training()
    assert acc.barriers == 1 and acc.trackers == []
    assert acc.get_tracker("jsonl").__class__ is GeneralTracker  # inert placeholder, like HF


def test_custom_tracker_receives_every_call_with_log_kwargs() -> None:
    rec = RecordingTracker()
    acc = FakeAccelerator([rec], None)
    acc.init_trackers("p", config={"x": 1})
    acc.log({"loss": 2.0}, step=5, log_kwargs={"recording": {"commit": True}, "other": {"no": 1}})
    assert acc.get_tracker("recording") is rec
    assert acc.get_tracker("recording", unwrap=True) is rec.calls
    acc.end_training()
    assert rec.calls == [("start",), ("config", {"x": 1}), ("log", {"loss": 2.0}, 5, {"commit": True}), ("finish",)]
    with pytest.raises(ConfigurationError, match="No started tracker is called 'nope'; started: recording"):
        acc.get_tracker("nope")


def test_custom_tracker_runs_on_every_process_when_it_asks() -> None:
    everywhere, main_only = RecordingTracker(main_only=False), RecordingTracker()
    acc = FakeAccelerator([everywhere, main_only], None, main=False)
    acc.init_trackers("p")
    acc.log({"a": 1})
    assert [c[0] for c in everywhere.calls] == ["start", "log"]
    assert main_only.calls == []


def test_incomplete_custom_tracker_is_a_clear_error() -> None:
    class Broken(GeneralTracker):
        pass

    with pytest.raises(TypeError, match="name, requires_logging_directory, tracker"):
        Broken()


def test_unknown_name_lists_the_available_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"'wandb' is not a known tracker; available here: jsonl"):
        filter_trackers("wandb", tmp_path)


def test_file_trackers_need_a_logging_dir() -> None:
    with pytest.raises(ConfigurationError, match="needs a logging directory; pass Accelerator\\(project_dir=...\\)"):
        filter_trackers("jsonl", None)


def test_all_means_every_available_tracker_plus_custom_ones(tmp_path: Path) -> None:
    rec = RecordingTracker()
    got = filter_trackers(["all", rec, "jsonl"], tmp_path)
    assert got == [*available_trackers(), rec]
    assert "jsonl" in available_trackers()
    assert filter_trackers(None, None) == []


def test_tensorboard_without_the_package_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real_find_spec(name, *a))
    assert "tensorboard" not in available_trackers()
    with pytest.raises(ConfigurationError, match="pip install tensorboard"):
        filter_trackers("tensorboard", tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="needs the tensorboard package")
def test_tensorboard_tracker_writes_event_files(tmp_path: Path) -> None:
    acc = FakeAccelerator("tensorboard", tmp_path)
    acc.init_trackers("tb", config={"lr": 0.1})
    acc.log({"loss": 0.5, "note": "hi", "pair": {"a": 1.0, "b": 2.0}}, step=1)
    acc.end_training()
    assert list((tmp_path / "tb").rglob("events.out.tfevents.*"))


def test_through_the_real_accelerator(tmp_path: Path) -> None:
    from accelify.runtime import Accelerator

    accelerator = Accelerator(cpu=True, log_with="jsonl", project_dir=str(tmp_path))
    accelerator.init_trackers("exp", config={"lr": 0.5})
    accelerator.log({"loss": torch.tensor(1.5)}, step=0)
    assert isinstance(accelerator.get_tracker("jsonl"), JSONLTracker)
    accelerator.end_training()
    assert json.loads((tmp_path / "exp" / "metrics.jsonl").read_text())["loss"] == 1.5
    Accelerator(cpu=True).end_training()  # what converted scripts do without trackers
