"""The recorder, loaded from outside the script, records without changing what it computes; the runner stops,
seeds and ends scripts as documented. Both ways in are tested: a fresh ``python`` that finds the startup hook on
``PYTHONPATH`` (:class:`Launcher`) and a child forked from the fork server (:class:`ForkServerLauncher`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from accelify.verify import ForkServerLauncher, Launcher
from accelify.verify.runner import RunOutcome, RunSpec

pytestmark = pytest.mark.multiprocess

TRAIN = '''\
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
done = 0
while done < STEPS:
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        done += 1
        if done == STEPS:
            break
print("weights", repr(model.weight.detach().double().sum().item()))
print("finished")
'''


@pytest.fixture(scope="module")
def forked() -> Iterator[ForkServerLauncher]:
    launcher = ForkServerLauncher(servers=1)
    yield launcher
    launcher.close()


def run(launcher: Launcher, folder: Path, *, target: str = "train.py", args: tuple[str, ...] = (), steps: int = 0,
        seed: int = 0, timeout: float = 60, module: bool = False) -> RunOutcome:
    spec = RunSpec("test", folder, target, folder.parent / f"logs-{folder.name}-{seed}-{steps}", args=args,
                   steps=steps, seed=seed, timeout=timeout, module=module)
    return launcher.run(spec)


def folder_with(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file, text in files.items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(text, encoding="utf-8")
    return folder


def test_recording_changes_nothing_the_script_computes(tmp_path: Path) -> None:
    seeded = "import torch\ntorch.manual_seed(0)\n" + TRAIN
    folder = folder_with(tmp_path, "plain", {"train.py": seeded})
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELIFY_")} | {"OMP_NUM_THREADS": "1"}
    plain = subprocess.run([sys.executable, "train.py"], cwd=folder, env=env, capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 0, plain.stderr
    recorded = run(Launcher(), folder)  # a fresh interpreter: the hook comes in through sitecustomize
    assert recorded.ok, recorded.stderr
    assert recorded.stdout[0] == plain.stdout
    (record,) = recorded.records
    assert len(record.steps) == 6 and len(record.backwards) == 6 and record.exited and not record.stopped
    assert record.steps[-1].group.initialized is False
    (loader,) = record.loaders.values()
    assert loader.site == "train.py:14"  # the `for x, y in loader` line of the seeded script
    assert (loader.length, loader.batch, loader.training) == (8, 8, True)


def test_the_run_stops_after_the_step_limit_with_exit_code_zero(tmp_path: Path, forked: ForkServerLauncher) -> None:
    folder = folder_with(tmp_path, "stop", {"train.py": TRAIN})
    outcome = run(forked, folder, args=("20",), steps=3)
    assert outcome.ok and "finished" not in outcome.stdout[0]
    (record,) = outcome.records
    assert record.stopped and [s.n for s in record.steps] == [1, 2, 3] and len(record.backwards) == 3


def test_an_unseeded_script_gets_the_same_seed_before_every_run(tmp_path: Path, forked: ForkServerLauncher) -> None:
    folder = folder_with(tmp_path, "seed", {"train.py": TRAIN})  # no seed anywhere in the script
    first, again, other = (run(forked, folder, seed=s) for s in (0, 0, 1))
    assert first.ok and again.ok and other.ok
    assert first.stdout[0] == again.stdout[0] != other.stdout[0]
    assert [b.loss for b in first.records[0].backwards] == [b.loss for b in again.records[0].backwards]


def test_local_modules_and_module_mode_are_recorded(tmp_path: Path, forked: ForkServerLauncher) -> None:
    helper = "def train(loader, model, optimizer):\n" + "".join(
        f"    {line}\n" for line in (
            "for x, y in loader:",
            "    optimizer.zero_grad()",
            "    model(x).sub(y).pow(2).mean().backward()",
            "    optimizer.step()",
        ))
    main = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom helpers import train\n"
            "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "train(DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4), model, optimizer)\n")
    folder = folder_with(tmp_path, "local", {"train.py": main, "helpers.py": helper, "pkg/__init__.py": "",
                                             "pkg/__main__.py": main})
    as_script = run(forked, folder)
    assert as_script.ok, as_script.stderr
    assert list(as_script.records[0].loaders) == ["helpers.py:2#0"]  # the loop is named where it is
    as_module = run(Launcher(), folder, target="pkg", module=True)  # `python -m pkg`, through sitecustomize
    assert as_module.ok, as_module.stderr
    assert len(as_module.records[0].steps) == 2


def test_dataloader_workers_do_not_record(tmp_path: Path, forked: ForkServerLauncher) -> None:
    folder = folder_with(tmp_path, "workers", {"train.py": TRAIN})
    outcome = run(forked, folder, args=("4", "2"))
    assert outcome.ok, outcome.stderr
    files = sorted(p.name for p in (folder.parent / f"logs-{folder.name}-0-0").glob("record.*.jsonl"))
    assert len(files) == 1 and len(outcome.records[0].steps) == 4


def test_a_sitecustomize_already_on_the_path_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = folder_with(tmp_path, "site", {"sitecustomize.py": "import builtins\nbuiltins.SITE_MARK = 'yes'\n"})
    script = "import builtins\nprint('mark', getattr(builtins, 'SITE_MARK', 'no'))\n" + TRAIN
    folder = folder_with(tmp_path, "chained", {"train.py": script})
    monkeypatch.setenv("PYTHONPATH", str(site))
    outcome = run(Launcher(), folder, args=("2",))
    assert outcome.ok, outcome.stderr
    assert "mark yes" in outcome.stdout[0] and len(outcome.records[0].steps) == 2


def test_a_hung_run_is_ended_at_the_timeout_with_its_stack(tmp_path: Path, forked: ForkServerLauncher) -> None:
    script = "import time\nimport torch\n\ndef wait():\n    time.sleep(600)\n\nwait()\n"
    folder = folder_with(tmp_path, "hang", {"train.py": script})
    for launcher in (forked, Launcher()):
        outcome = run(launcher, folder, timeout=4)
        assert outcome.timed_out and outcome.exit_code is None
        stack = outcome.records[0].stack
        assert f'File "{folder}/train.py", line 5 in wait' in stack and "line 7 in <module>" in stack
        pid = outcome.records[0].pid
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_a_forked_run_sees_the_interpreter_a_fresh_run_sees(tmp_path: Path, forked: ForkServerLauncher) -> None:
    script = "import json, sys\nprint(json.dumps([sys.path[:6], sys.argv, __name__]))\n"
    folder = folder_with(tmp_path, "same", {"train.py": script})
    fresh, child = run(Launcher(), folder, args=("--x", "1")), run(forked, folder, args=("--x", "1"))
    assert fresh.ok and child.ok, (fresh.stderr, child.stderr)
    assert child.stdout[0] == fresh.stdout[0]
    assert f'"{folder.resolve()}"' in fresh.stdout[0] and '"__main__"' in fresh.stdout[0]


def test_printed_lines_are_recorded_with_their_line_and_whether_an_epoch_was_running(
        tmp_path: Path, forked: ForkServerLauncher) -> None:
    script = ("import sys\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
              "loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)\n"
              "print('before', 1)\n"
              "for (x,) in loader:\n"
              "    print('batch', x.shape[0])\n"
              "sys.stdout.write('after 2.5')\n"
              "sys.stdout.write(' and 3\\nno digits here\\n')\n")
    folder = folder_with(tmp_path, "printed", {"train.py": script})
    outcome = run(forked, folder)
    assert outcome.ok, outcome.stderr
    assert outcome.stdout[0] == "before 1\nbatch 4\nbatch 4\nafter 2.5 and 3\nno digits here\n"
    lines = [(line.text, line.site, line.in_epoch) for line in outcome.records[0].lines]
    assert lines == [("before 1", "train.py:5", False), ("batch 4", "train.py:7", True),
                     ("batch 4", "train.py:7", True), ("after 2.5 and 3", "train.py:9", False)]


def test_parameters_are_fingerprinted_in_full_where_verify_compares_them(tmp_path: Path,
                                                                         forked: ForkServerLauncher) -> None:
    """Every value for the first 64 steps, at powers of two and at the step limit; a sample and the sum between."""
    script = ("import torch\nmodel = torch.nn.Linear(64, 4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
              "for _ in range(200):\n    optimizer.zero_grad()\n"
              "    model(torch.randn(8, 64)).pow(2).mean().backward()\n"
              "    optimizer.step()\n")
    folder = folder_with(tmp_path, "sparse", {"train.py": script})
    outcome = run(forked, folder, steps=130)
    assert outcome.ok, outcome.stderr
    weights = {step.n: step.params[0] for step in outcome.records[0].steps}
    for n in (1, 64, 128, 130):
        assert len(weights[n].values) == 256 and len(weights[n].grads) == 256 and not weights[n].sampled
    for n in (65, 100, 129):
        assert len(weights[n].values) == 4 and weights[n].grads == () and weights[n].sampled
        assert weights[n].total != weights[n - 1].total


def test_an_n_process_run_whose_port_was_taken_is_started_again(tmp_path: Path, forked: ForkServerLauncher,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Two verify runs at once: the port chosen for rank 0's store is bound by someone else before rank 0 binds it."""
    import socket

    from accelify.verify import runner

    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        ports = iter([blocker.getsockname()[1]])
        free = runner._free_port
        monkeypatch.setattr(runner, "_free_port", lambda: next(ports, None) or free())
        script = "import torch.distributed as dist\ndist.init_process_group('gloo')\nprint('rank', dist.get_rank())\n"
        folder = folder_with(tmp_path, "port", {"train.py": script})
        spec = RunSpec("port", folder, "train.py", tmp_path / "logs-port", processes=2, timeout=60)
        outcome = forked.run(spec)
    assert outcome.ok and outcome.stdout == ("rank 0\n", "rank 1\n"), outcome.stderr
    assert next(ports, None) is None  # the taken port was tried first


def test_the_sampled_indices_of_a_large_parameter_stay_inside_it() -> None:
    """Set U's U1 (a VGG head of 102,760,448 values): a float32 ``linspace`` rounded the last sampled index up to the
    parameter's size past 2**24 values, and the hook's ``index_select`` failed every run ("the original failed")."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "accelify" / "verify" / "hook"))
    try:
        import accelify_verify_fingerprint as hook
    finally:
        sys.path.pop(0)
    for count, size in ((10, 10), (2**24 + 4, 1000), (102_760_448, 4096)):
        index = hook._indices(torch, count, size, "cpu")
        assert len(index) == size and int(index[0]) == 0 and int(index[-1]) == count - 1
        assert bool((index[1:] > index[:-1]).all())
