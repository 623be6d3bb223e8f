"""notebook_launcher / debug_launcher: functions on 2 local Gloo processes through torch elastic."""

from __future__ import annotations

import os
import signal
import pytest

from accelify.runtime import debug_launcher, notebook_launcher
from accelify.runtime.errors import AccelifyRuntimeError, ConfigurationError
from accelify.runtime.launch import WorkerFailedError


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a fresh notebook kernel would: no Accelerator created yet.

    Other test files create Accelerators in this pytest process; the launcher rightly refuses then.
    """
    from accelify.runtime import state

    monkeypatch.setattr(state, "_SHARED", {})


def report(tag: str) -> tuple:
    """Runs in each worker: an Accelerator created inside the function, as the card asks."""
    import torch

    from accelify.runtime import Accelerator

    acc = Accelerator()
    total = acc.reduce(torch.tensor([acc.process_index + 1.0]), reduction="sum")
    return (tag, acc.process_index, acc.num_processes, total.item(), acc.device.type, acc.mixed_precision)


def fail_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise KeyError("rank one is broken")


@pytest.mark.multiprocess
def test_launchers_run_on_two_processes_and_restore_the_parent() -> None:
    import torch

    if torch.cuda.device_count() == 1:
        pytest.skip("notebook_launcher(num_processes=2) needs 2 GPUs on a GPU machine")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    env_before = dict(os.environ)
    sigint_before = signal.getsignal(signal.SIGINT)
    results = notebook_launcher(report, ("nb",), num_processes=2, mixed_precision="bf16", use_port=0)
    assert results == {r: ("nb", r, 2, 3.0, device, "bf16") for r in (0, 1)}
    assert debug_launcher(report, ("dbg",)) == {r: ("dbg", r, 2, 3.0, "cpu", "no") for r in (0, 1)}
    with pytest.raises(WorkerFailedError, match=r"process 1 failed \(exit code 1\)") as info:
        debug_launcher(fail_on_rank_one)
    assert "KeyError: 'rank one is broken'" in str(info.value) and info.value.rank == 1
    assert dict(os.environ) == env_before and signal.getsignal(signal.SIGINT) is sigint_before


def test_one_process_runs_here_with_the_settings() -> None:
    from accelify.runtime.launch_settings import load_launch_settings as load_settings

    assert notebook_launcher(lambda x: (x, load_settings().mixed_precision), (4,), num_processes=1,
                             mixed_precision="bf16") == (4, "bf16")
    assert "ACCELIFY_LAUNCH_CONFIG" not in os.environ


def test_refuses_when_an_accelerator_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelify.runtime import state

    assert not state.is_initialized()
    # What creating a PartialState/Accelerator here records (without touching the real process state).
    monkeypatch.setitem(state._SHARED, "info", state.ProcessInfo.from_environ({}))
    assert state.is_initialized()
    with pytest.raises(AccelifyRuntimeError, match="create the Accelerator only inside the function"):
        notebook_launcher(report, ("x",), num_processes=2, use_port=0)


def test_refuses_to_fork_after_cuda_was_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(AccelifyRuntimeError, match="CUDA was already initialised in this process"):
        debug_launcher(report, ("x",))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"mixed_precision": "fp8"}, "mixed_precision='fp8'"),
     ({"num_processes": 0}, "num_processes=0"), ({"master_addr": "10.0.0.1"}, "this machine only")],
)
def test_invalid_requests(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigurationError, match=needle.replace("(", r"\(")):
        notebook_launcher(report, num_processes=kwargs.pop("num_processes", 2), **kwargs)
