"""`accelify launch -n 2` says so when the processes never joined a process group (they trained independently)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accelify.launch import joined as launch_joined

ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]

PLAIN = '''\
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
print("trained")
'''

# A hand-written DDP script that closes its group before it ends: it did join.
JOINS_THEN_DESTROYS = '''\
import sys
sys.path.insert(0, {root!r})
from accelify.launch import joined as launch_joined
launch_joined.watch()
import torch.distributed as dist
dist.init_process_group("gloo", store=dist.HashStore(), world_size=1, rank=0)
dist.destroy_process_group()
print(launch_joined.joined())
'''


@pytest.mark.multiprocess
def test_unconverted_script_on_two_processes_is_named_at_the_end(tmp_path: Path, clean_env) -> None:
    script = tmp_path / "plain.py"
    script.write_text(PLAIN, encoding="utf-8")
    proc = subprocess.run([*ACCELIFY, "launch", "--cpu", "-n", "2", "-q", str(script)], capture_output=True,
                          text=True, timeout=180, env=clean_env(None), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("trained") == 2
    warning = proc.stderr.strip().splitlines()[-1]
    assert warning.startswith(f"accelify launch: warning: the 2 processes of {script} never joined a process group")
    assert "accelify convert" in warning and "accelify verify" in warning


@pytest.mark.multiprocess
def test_a_group_destroyed_before_the_end_still_counts_as_joined(tmp_path: Path) -> None:
    script = tmp_path / "ddp.py"
    script.write_text(JOINS_THEN_DESTROYS.format(root=str(Path(__file__).resolve().parents[2])), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_markers_are_left_only_by_lonely_workers_of_multi_process_launches(tmp_path: Path, monkeypatch) -> None:
    launch_file = str(tmp_path / "accelify-launch-x.yaml")
    monkeypatch.setattr(launch_joined, "joined", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "1")
    launch_joined.note_if_alone(launch_file)  # one process: nothing to say
    assert launch_joined.alone_ranks(launch_file) == ()
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        launch_joined.note_if_alone(launch_file)
    assert launch_joined.alone_ranks(launch_file) == (0, 1)
    assert launch_joined.alone_ranks(launch_file) == ()  # collected once, then removed
    monkeypatch.setattr(launch_joined, "joined", lambda: True)
    launch_joined.note_if_alone(launch_file)
    assert launch_joined.alone_ranks(launch_file) == ()


def test_the_warning_names_the_script_and_the_lonely_processes() -> None:
    assert "the 4 processes of train.py never joined" in launch_joined.alone_warning("train.py", (0, 1, 2, 3), 4)
    assert "process 3 of train.py never joined" in launch_joined.alone_warning("train.py", (3,), 4)
    assert "processes 1, 2 of train.py" in launch_joined.alone_warning("train.py", (1, 2), 4)
    # a program's modules may change with it: the advice writes a runnable copy in a folder (-o FILE would refuse)
    advice = launch_joined.alone_warning("src/train.py", (0, 1), 2)
    assert "accelify convert src/train.py -o dist/" in advice and "launch dist/train.py" in advice
