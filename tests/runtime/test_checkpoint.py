"""save_state/load_state on one process: round trips, safe loading, automatic naming, and atomicity."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import accelify.runtime.checkpoint.atomic as atomic
import accelify.runtime.checkpoint as ckpt
import accelify.runtime.checkpoint.layout as ckpt_files
from accelify.runtime.checkpoint import CheckpointError, ProjectConfiguration
from accelify.runtime.errors import ConfigurationError
from accelify.runtime.prepared import PreparedObjects


class Point:
    """A user type in a registered object's state: not loadable with weights_only until allow-listed."""

    def __init__(self, x: int) -> None:
        self.x = x


class Counter:
    def __init__(self, value: Any = 0) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = state["value"]


class Loader:
    """Stands in for DataLoaderShard's state_dict/load_state_dict (epoch and position)."""

    def __init__(self) -> None:
        self.position = {"epoch": 0, "batch": 0}

    def state_dict(self) -> dict[str, int]:
        return dict(self.position)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = dict(state)


def _listed(name: str) -> property:
    return property(lambda self: getattr(self.prepared, name), lambda self, value: setattr(self.prepared, name, value))


class FakeAccelerator:
    """Plain objects in a PreparedObjects record, saved and loaded through checkpoint.py as Accelerator does
    (what it passes: docs/INTERNALS.md); ``_models`` and the like are views of the record, as on Accelerator."""

    _models, _optimizers, _schedulers = _listed("models"), _listed("optimizers"), _listed("schedulers")
    _dataloaders, _custom_objects = _listed("dataloaders"), _listed("custom_objects")

    def __init__(self, config: ProjectConfiguration | None = None, seed: int = 0, scaler: bool = True) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.05)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)
        self.loader = Loader()
        self.prepared = PreparedObjects(models=[self.model], optimizers=[self.optimizer],
                                        schedulers=[self.scheduler], dataloaders=[self.loader])
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0) if scaler else None
        self.project_configuration = config or ProjectConfiguration()
        self.step = 0

    def register_for_checkpointing(self, *objects: Any) -> None:
        ckpt.register_for_checkpointing(self.prepared, objects)

    def save_state(self, output_dir: Any = None, safe_serialization: bool = True) -> Path:
        return ckpt.save_state(self.prepared, self.project_configuration, output_dir,
                               safe_serialization=safe_serialization, scaler=self.scaler, step=self.step,
                               process_index=0, model_state=lambda model: model.state_dict())

    def load_state(self, input_dir: Any = None, **kwargs: Any) -> None:
        self.step = ckpt.load_state(self.prepared, self.project_configuration, input_dir, scaler=self.scaler,
                                    device=torch.device("cpu"), process_index=0, **kwargs)

    def train(self, steps: int) -> list[float]:
        losses = []
        for _ in range(steps):
            x = torch.randn(4, 6)
            noise = float(np.random.rand()) + random.random()
            loss = (self.model(x) ** 2).mean() + noise
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.scheduler.step()
            self.loader.position["batch"] += 1
            self.step += 1
            losses.append(loss.item())
        return losses


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_resume_is_bitwise_identical_to_training_straight(tmp_path: Path) -> None:
    _seed_all(1)
    straight = FakeAccelerator()
    _seed_all(2)
    expected = straight.train(6)

    _seed_all(1)
    first = FakeAccelerator()
    first.register_for_checkpointing(Counter(7))
    _seed_all(2)
    head = first.train(3)
    first.save_state(tmp_path / "ck")
    first.train(2)  # moves every RNG on; load_state must bring them back

    resumed = FakeAccelerator(seed=99)
    counter = Counter()
    resumed.register_for_checkpointing(counter)
    resumed.load_state(tmp_path / "ck")
    assert counter.value == 7 and resumed.step == 3 and resumed.loader.position == {"epoch": 0, "batch": 3}
    assert resumed.scaler is not None and resumed.scaler.get_scale() == 1024.0
    tail = resumed.train(3)
    assert head + tail == expected  # exact float equality: bitwise on CPU
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)


def test_layout_uses_hugging_face_file_names(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    acc.register_for_checkpointing(Counter(1), Counter(2))
    out = acc.save_state(tmp_path / "ck")
    assert out == tmp_path / "ck"
    assert sorted(os.listdir(out)) == [
        "custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "dl_state_dict.bin", "model.safetensors",
        "optimizer.bin", "random_states_0.pkl", "scaler.pt", "scheduler.bin",
    ]
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no temporary folder left behind
    acc.save_state(tmp_path / "bin", safe_serialization=False)
    assert (tmp_path / "bin" / "pytorch_model.bin").is_file()
    fresh = FakeAccelerator(seed=5)
    fresh.register_for_checkpointing(Counter(), Counter())
    fresh.load_state(tmp_path / "bin")
    assert torch.equal(fresh.model[0].weight, acc.model[0].weight)


def test_every_file_loads_with_weights_only(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    acc.register_for_checkpointing(Counter(7))
    acc.train(2)
    acc.save_state(tmp_path / "ck")
    acc.save_state(tmp_path / "bin", safe_serialization=False)
    loaded = {}
    for folder in ("ck", "bin"):
        for name in os.listdir(tmp_path / folder):
            if not name.endswith(".safetensors"):
                loaded[name] = torch.load(tmp_path / folder / name, weights_only=True)
    assert sorted(loaded) == ["custom_checkpoint_0.pkl", "dl_state_dict.bin", "optimizer.bin", "pytorch_model.bin",
                              "random_states_0.pkl", "scaler.pt", "scheduler.bin"]  # every pickle, none skipped
    assert loaded["custom_checkpoint_0.pkl"] == {"value": 7} and loaded["dl_state_dict.bin"]["batch"] == 2
    assert loaded["random_states_0.pkl"]["step"] == 2 and loaded["optimizer.bin"]["state"]
    assert torch.equal(loaded["pytorch_model.bin"]["0.weight"], acc.model[0].weight)


def test_tied_weights_survive_safetensors(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    ckpt.save_checkpoint(tmp_path / "ck", model_states=[model.state_dict()])
    other = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 5, bias=False))
    other[1].weight = other[0].weight
    ckpt.load_checkpoint(tmp_path / "ck", model_loaders=[other.load_state_dict])
    assert torch.equal(other[0].weight, model[0].weight) and other[1].weight is other[0].weight


def test_untrusted_type_in_registered_state_says_how_to_allow_it(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    acc.register_for_checkpointing(Counter(Point(3)))
    acc.save_state(tmp_path / "ck")
    again = FakeAccelerator()
    target = Counter()
    again.register_for_checkpointing(target)
    with pytest.raises(CheckpointError) as info:
        again.load_state(tmp_path / "ck")
    message = str(info.value)
    assert "custom_checkpoint_0.pkl (registered object 0 (Counter))" in message
    assert f"{__name__}.Point" in message and "torch.serialization.add_safe_globals([Point])" in message
    with torch.serialization.safe_globals([Point]):
        again.load_state(tmp_path / "ck")
    assert target.value.x == 3


def test_register_for_checkpointing_lists_every_bad_item() -> None:
    acc = FakeAccelerator()
    with pytest.raises(ConfigurationError) as info:
        acc.register_for_checkpointing(Counter(), 42, object())
    assert "item 1: int (42)" in str(info.value) and "item 2: object" in str(info.value)
    assert acc._custom_objects == []


def test_mismatched_registered_objects_are_an_error(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    acc.register_for_checkpointing(Counter())
    acc.save_state(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="1 custom checkpoint\\(s\\) but 0 object\\(s\\) are registered"):
        FakeAccelerator().load_state(tmp_path / "ck")


def test_missing_folder_and_missing_arguments(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    with pytest.raises(CheckpointError, match="No checkpoint folder at"):
        acc.load_state(tmp_path / "nope")
    with pytest.raises(ConfigurationError, match="save_state needs output_dir"):
        acc.save_state()
    with pytest.raises(ConfigurationError, match="load_state needs input_dir"):
        acc.load_state()
    acc.save_state(tmp_path / "ck")
    with pytest.raises(TypeError, match="unexpected keyword\\(s\\) bogus"):
        acc.load_state(tmp_path / "ck", bogus=1)


def test_automatic_naming_prunes_and_resumes_the_newest(tmp_path: Path) -> None:
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    acc = FakeAccelerator(config)
    for _ in range(3):
        acc.train(1)
        acc.save_state()
    root = tmp_path / "checkpoints"
    atomic.wait_background()  # pruning runs after the newest checkpoint is on disk
    assert sorted(os.listdir(root)) == ["checkpoint_1", "checkpoint_2"]
    assert config.iteration == 3
    fresh_config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    fresh = FakeAccelerator(fresh_config, seed=3)
    fresh.load_state()
    assert fresh.step == 3 and fresh_config.iteration == 3  # the next save will not collide
    assert torch.equal(fresh.model[2].bias, acc.model[2].bias)
    with pytest.raises(CheckpointError, match="already exists"):
        config.iteration = 2
        acc.save_state()
    with pytest.raises(ConfigurationError, match="needs a project folder"):
        FakeAccelerator(ProjectConfiguration(automatic_checkpoint_naming=True)).save_state()


def test_project_configuration_defaults() -> None:
    config = ProjectConfiguration(project_dir="p")
    assert (config.logging_dir, config.iteration, config.total_limit, config.save_on_each_node) == ("p", 0, None, False)
    config = ProjectConfiguration(project_dir="p", logging_dir="l")
    assert config.logging_dir == "l"
    with pytest.raises(ConfigurationError, match="total_limit=0 must be >= 1"):
        ProjectConfiguration(project_dir="p", total_limit=0)


def test_a_failing_write_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acc = FakeAccelerator()
    acc.save_state(tmp_path / "ck")
    before = acc.model[0].weight.detach().clone()
    acc.train(2)
    real = ckpt_files.write_state

    def flaky(path: Path, obj: Any) -> None:
        if path.name == "scheduler.bin":
            raise OSError(28, "No space left on device")
        real(path, obj)

    monkeypatch.setattr(ckpt_files, "write_state", flaky)
    with pytest.raises(OSError, match="No space left"):
        acc.save_state(tmp_path / "ck")
    assert os.listdir(tmp_path) == ["ck"]
    fresh = FakeAccelerator(seed=4)
    fresh.load_state(tmp_path / "ck")
    assert torch.equal(fresh.model[0].weight, before)


def _die_in_child(action: Any) -> None:
    """Run ``action`` in a forked child that must end by os._exit (a killed save); wait for it."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            action()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9, "the child should have been 'killed' mid-save"


@pytest.mark.multiprocess
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("kill_at", ["mid_write", "between_renames"])
def test_a_process_killed_mid_save_leaves_the_previous_checkpoint_loadable(tmp_path: Path, kill_at: str) -> None:
    acc = FakeAccelerator()
    acc.register_for_checkpointing(Counter(1))
    acc.save_state(tmp_path / "ck")
    saved = acc.model[0].weight.detach().clone()

    def killed_save() -> None:
        acc.train(1)
        acc._custom_objects[0].value = 2
        if kill_at == "mid_write":
            real = ckpt_files.write_state
            ckpt_files.write_state = lambda path, obj: os._exit(9) if path.name == "scheduler.bin" else real(path, obj)
        else:
            real_rename = os.rename
            os.rename = lambda a, b: (real_rename(a, b), os._exit(9)) if ".old-" in str(b) else real_rename(a, b)
        acc.save_state(tmp_path / "ck")

    _die_in_child(killed_save)
    leftovers = sorted(p.name.split("-")[0] for p in tmp_path.iterdir())
    assert leftovers == ([".ck.tmp", "ck"] if kill_at == "mid_write" else [".ck.old", ".ck.tmp"])
    fresh = FakeAccelerator(seed=8)
    counter = Counter()
    fresh.register_for_checkpointing(counter)
    fresh.load_state(tmp_path / "ck")
    assert counter.value == 1 and torch.equal(fresh.model[0].weight, saved)
    fresh.save_state(tmp_path / "ck")  # the next save cleans up and puts the folder back in place
    atomic.wait_background()  # (the copy it replaces goes once the new one is on disk)
    assert os.listdir(tmp_path) == ["ck"]


def test_durable_saves_fsync_every_file_and_the_rename_and_can_be_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_file, real_dir = atomic.fsync_path, atomic.fsync_dir
    monkeypatch.setattr(atomic, "fsync_path", lambda p: (synced.append(Path(p).name), real_file(p)))
    monkeypatch.setattr(atomic, "fsync_dir", lambda p: (synced.append(Path(p).name), real_dir(p)))
    monkeypatch.delenv(ckpt.DURABLE_ENV, raising=False)
    acc = FakeAccelerator()
    assert acc.project_configuration.durable is True
    acc.save_state(tmp_path / "ck")
    atomic.wait_background()
    # every file, then the folder itself, then its parent (which makes the rename durable)
    assert sorted(synced[:-2]) == sorted(os.listdir(tmp_path / "ck")) and synced[-2:] == ["ck", tmp_path.name], synced
    synced.clear()
    monkeypatch.setenv(ckpt.DURABLE_ENV, "0")
    fast = FakeAccelerator(seed=2)
    assert fast.project_configuration.durable is False
    fast.save_state(tmp_path / "ck")  # still atomic (replaces the folder), just not fsynced
    assert synced == [] and os.listdir(tmp_path) == ["ck"]
    acc.load_state(tmp_path / "ck")
    assert torch.equal(acc.model[0].weight, fast.model[0].weight)
    assert ProjectConfiguration(durable=True).durable is True  # an explicit value beats the variable
    monkeypatch.setenv(ckpt.DURABLE_ENV, "maybe")
    with pytest.raises(ConfigurationError, match="ACCELIFY_DURABLE_CHECKPOINTS='maybe' is not valid; allowed: true or false"):
        ProjectConfiguration()


def test_older_copies_are_deleted_only_once_the_new_checkpoint_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=1, durable=True)
    acc = FakeAccelerator(config)
    acc.save_state()
    acc.save_state(tmp_path / "ck")
    atomic.wait_background()
    release = threading.Event()
    real_file = atomic.fsync_path
    monkeypatch.setattr(atomic, "fsync_path", lambda p: (release.wait(10), real_file(p)))
    acc.train(1)
    acc.save_state()  # returns while its fsyncs are held back
    root = tmp_path / "checkpoints"
    assert sorted(os.listdir(root)) == ["checkpoint_0", "checkpoint_1"]  # not pruned yet
    release.set()
    atomic.wait_background()
    assert os.listdir(root) == ["checkpoint_1"]
    release.clear()
    acc.save_state(tmp_path / "ck")  # overwriting: the previous copy waits aside until the new one is durable
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == [".ck.old", "checkpoints", "ck"]
    release.set()
    atomic.wait_background()
    assert sorted(os.listdir(tmp_path)) == ["checkpoints", "ck"]


def test_a_failed_background_fsync_is_raised_by_the_next_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=1, durable=True)
    acc = FakeAccelerator(config)
    acc.save_state()
    atomic.wait_background()

    def broken(path: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic, "fsync_path", broken)
    acc.train(1)
    acc.save_state()
    acc.load_state()  # loading does not wait for (or report) the background job: the files are readable
    assert acc.step == 1
    with pytest.raises(atomic.DurabilityError, match=r"checkpoint_1 could not be flushed to the disk \(\[Errno 5\]"):
        acc.save_state()
    root = tmp_path / "checkpoints"
    assert sorted(os.listdir(root)) == ["checkpoint_0", "checkpoint_1"]  # the durable one was kept
    monkeypatch.undo()
    acc.save_state()  # reported once; the disk works again
    atomic.wait_background()
    assert os.listdir(root) == ["checkpoint_2"] and config.iteration == 3


def test_rng_states_round_trip() -> None:
    _seed_all(3)
    states = ckpt.rng_states()
    expected = (random.random(), float(np.random.rand()), torch.rand(1).item())
    _seed_all(4)
    ckpt.set_rng_states(states)
    assert (random.random(), float(np.random.rand()), torch.rand(1).item()) == expected


WORKER = Path(__file__).parent / "workers" / "checkpoint_resume.py"


@pytest.mark.multiprocess
def test_two_process_resume_in_a_fresh_launch_is_bitwise_identical(run_distributed: Any, tmp_path: Path) -> None:
    """Two launches: train + save automatically named checkpoints + JSONL logging; then resume and compare."""
    first = run_distributed(WORKER, "first", str(tmp_path))
    assert first.stdout.count("FIRST OK") == 2, first.stdout + first.stderr
    resumed = run_distributed(WORKER, "resume", str(tmp_path))
    assert resumed.stdout.count("RESUME OK") == 2, resumed.stdout + resumed.stderr


@pytest.mark.multiprocess
def test_two_processes_refuse_a_damaged_checkpoint_together_and_change_nothing(run_distributed: Any, tmp_path: Path) -> None:
    proc = run_distributed(Path(__file__).parent / "workers" / "checkpoint_faults.py", str(tmp_path))
    assert proc.stdout.count("CHECKPOINT-FAULTS OK (13 cases)") == 2, proc.stdout + proc.stderr


def test_resuming_on_more_processes_warns_and_keeps_the_rest(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    ckpt.save_checkpoint(tmp_path / "ck", model_states=[model.state_dict()], step=5, process_index=0)
    other = nn.Linear(2, 2)
    with pytest.warns(UserWarning, match="saved by fewer processes"):
        result = ckpt.load_checkpoint(tmp_path / "ck", model_loaders=[other.load_state_dict], process_index=1)
    assert result == {"step": 5} and torch.equal(other.weight, model.weight)


def test_second_model_and_optimizer_get_numbered_files_and_bad_parent_raises(tmp_path: Path) -> None:
    a, b = nn.Linear(2, 2), nn.Linear(3, 1)
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.2)
    ckpt.save_checkpoint(
        tmp_path / "ck", model_states=[a.state_dict(), b.state_dict()], optimizer_states=[oa.state_dict(), ob.state_dict()]
    )
    assert {"model.safetensors", "model_1.safetensors", "optimizer.bin", "optimizer_1.bin"} <= set(os.listdir(tmp_path / "ck"))
    b2 = nn.Linear(3, 1)
    ob2 = torch.optim.SGD(b2.parameters(), lr=0.9)
    ckpt.load_checkpoint(tmp_path / "ck", model_loaders=[a.load_state_dict, b2.load_state_dict],
                         optimizer_loaders=[oa.load_state_dict, ob2.load_state_dict])
    assert torch.equal(b2.weight, b.weight) and ob2.param_groups[0]["lr"] == 0.2
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(OSError):
        ckpt.save_checkpoint(tmp_path / "file" / "ck")


def test_through_the_real_accelerator(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    from accelify.runtime import Accelerator

    def build() -> tuple[Any, ...]:
        accelerator = Accelerator(cpu=True, project_dir=str(tmp_path))
        accelerator.project_configuration.automatic_checkpoint_naming = True
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(12, 3), torch.randn(12, 1)), batch_size=4, shuffle=True)
        return (accelerator, *accelerator.prepare(model, optimizer, loader))

    accelerator, model, optimizer, loader = build()
    expected = []  # the rest of the epoch after the save
    for i, (x, y) in enumerate(loader):
        if i == 0:
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            assert accelerator.save_state().name == "checkpoint_0"
        else:
            expected.append(x)
    accelerator, model2, optimizer2, loader2 = build()
    accelerator.load_state()
    assert torch.equal(model2.weight, model.weight)
    assert optimizer2.state_dict()["state"][0]["step"] == 1
    resumed = [batch[0] for batch in accelerator.skip_first_batches(loader2, 1)]
    assert len(resumed) == 2 and all(torch.equal(a, b) for a, b in zip(resumed, expected))


def _everything(acc: FakeAccelerator) -> dict[str, Any]:
    """Every state load_state restores, copied: models, optimizer, scheduler, scaler, loader, object, RNGs."""
    import copy

    return copy.deepcopy({
        "model": acc.model.state_dict(), "optimizer": acc.optimizer.state_dict(),
        "scheduler": acc.scheduler.state_dict(), "scaler": acc.scaler.state_dict(), "loader": acc.loader.state_dict(),
        "custom": [obj.state_dict() for obj in acc._custom_objects], "step": acc.step,
        "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(), "numpy_rng": np.random.get_state()[1],
    })


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(a, np.ndarray):
        return bool((a == b).all())
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


CHECKPOINT_FILES = ["model.safetensors", "pytorch_model.bin", "optimizer.bin", "scheduler.bin", "scaler.pt",
                    "dl_state_dict.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl"]


# a checkpoint without dl_state_dict.bin loads (Hugging Face writes none by default): see the test after this one
DAMAGES = [(name, damage) for name in CHECKPOINT_FILES for damage in ("truncated", "emptied", "missing")
           if (name, damage) != ("dl_state_dict.bin", "missing")]


@pytest.mark.parametrize(("name", "damage"), DAMAGES)
def test_a_damaged_or_missing_file_is_named_and_nothing_is_loaded(tmp_path: Path, name: str, damage: str) -> None:
    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, durable=False)
    acc = FakeAccelerator(config)
    acc.register_for_checkpointing(Counter(1))
    safe = name != "pytorch_model.bin"
    for value in (2, 3):
        acc.train(1)
        acc._custom_objects[0].value = value
        acc.save_state(safe_serialization=safe)
    damaged = tmp_path / "checkpoints" / "checkpoint_1" / name
    if damage == "missing":
        damaged.unlink()
    else:  # an interrupted copy or a full disk: torch reads "OSError: [Errno 22] Invalid argument", EOFError, ...
        os.truncate(damaged, 0 if damage == "emptied" else damaged.stat().st_size - 10)

    fresh = FakeAccelerator(ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True), seed=9)
    fresh.register_for_checkpointing(Counter(0))
    fresh.train(2)
    before = _everything(fresh)
    with pytest.raises(CheckpointError) as info:
        fresh.load_state()  # the newest: checkpoint_1
    message = str(info.value)
    shown = str(damaged)
    if damage == "missing" and name.endswith(("model.safetensors", "model.bin")):
        shown = f"{damaged.parent / 'model.safetensors'} (or pytorch_model.bin)"
    elif damage == "missing" and name.startswith("custom"):
        shown = f"{damaged.parent} holds 0 custom checkpoint(s) (custom_checkpoint_0.pkl missing)"
    assert shown in message, message
    assert ("cannot be read" in message) if damage != "missing" else ("missing" in message), message
    assert f"Checkpoint folder: {damaged.parent}. Nothing was loaded" in message, message
    assert f"Load the previous checkpoint instead: accelerator.load_state('{tmp_path / 'checkpoints' / 'checkpoint_0'}')" in message
    assert _same(_everything(fresh), before), "a failed load_state changed some state"
    fresh.load_state(tmp_path / "checkpoints" / "checkpoint_0")  # the advice works
    assert fresh._custom_objects[0].value == 2 and fresh.step == 1


def test_a_checkpoint_without_data_loader_state_loads_the_rest(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    acc.train(2)
    acc.save_state(tmp_path / "ck")
    (tmp_path / "ck" / "dl_state_dict.bin").unlink()
    fresh = FakeAccelerator(seed=4)
    fresh.load_state(tmp_path / "ck")
    assert fresh.step == 2 and torch.equal(fresh.model[0].weight, acc.model[0].weight)
    assert fresh.loader.position == {"epoch": 0, "batch": 0}  # kept as it was


def test_a_checkpoint_that_does_not_fit_changes_nothing(tmp_path: Path) -> None:
    acc = FakeAccelerator()
    acc.save_state(tmp_path / "ck")
    (tmp_path / "other").mkdir()  # not a checkpoint: never offered as the previous one

    wider = FakeAccelerator(seed=1)
    wider.model[2] = nn.Linear(8, 3)  # the last layer changed since the save
    wider.optimizer = torch.optim.AdamW(wider.model.parameters(), lr=0.05)
    wider._models, wider._optimizers = [wider.model], [wider.optimizer]
    before = _everything(wider)
    with pytest.raises(CheckpointError) as info:
        wider.load_state(tmp_path / "ck")
    assert "The weights of model 0 in" in str(info.value) and "2.weight is [2, 8] in the checkpoint, [3, 8] in the model" in str(
        info.value)
    assert "No earlier checkpoint was found next to it" in str(info.value)
    assert _same(_everything(wider), before)

    grouped = FakeAccelerator(seed=2)  # same model, but the optimizer has two parameter groups now
    grouped.optimizer = torch.optim.AdamW([{"params": grouped.model[0].parameters()},
                                           {"params": grouped.model[2].parameters()}], lr=0.05)
    grouped._optimizers = [grouped.optimizer]
    before = _everything(grouped)
    with pytest.raises(CheckpointError, match=r"optimizer.bin \(optimizer 0\) does not fit: its parameter groups hold "
                                              r"\[4\] parameters, the optimizer's \[2, 2\]"):
        grouped.load_state(tmp_path / "ck")
    assert _same(_everything(grouped), before)

    class Fussy(Counter):
        def load_state_dict(self, state: dict[str, Any]) -> None:
            raise ValueError("refuses")

    acc.register_for_checkpointing(Counter(5))
    acc.save_state(tmp_path / "ck")
    fussy = FakeAccelerator(seed=3)
    fussy.register_for_checkpointing(Fussy())
    before = _everything(fussy)
    with pytest.raises(CheckpointError, match=r"registered object 0 \(Fussy\) raised in load_state_dict") as info:
        fussy.load_state(tmp_path / "ck")
    assert "models, optimizers, schedulers and random states are unchanged" in str(info.value)
    assert _same(_everything(fussy), before)
