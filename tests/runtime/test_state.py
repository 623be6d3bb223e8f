"""Process state: ProcessInfo from the launcher's variables, PartialState, splitting, loud setup failures."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from accelify.runtime import DistributedSetupError, DistributedType, GradientState, PartialState, ProcessInfo
from accelify.runtime.errors import ConfigurationError
from accelify.runtime.state import _split, is_initialized


def test_process_info_defaults_to_one_process() -> None:
    assert ProcessInfo.from_environ({}) == ProcessInfo(0, 1, 0, 1, 0, None, None)


def test_process_info_reads_torchrun_variables() -> None:
    env = {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
    }
    assert ProcessInfo.from_environ(env) == ProcessInfo(3, 4, 1, 2, 1, "10.0.0.1", 29500)


def test_process_info_reads_srun_and_mpirun() -> None:
    srun = {"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODEID": "1"}
    info = ProcessInfo.from_environ(srun)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size, info.node_rank) == (2, 4, 0, 2, 1)
    # a bare sbatch script (no srun step) is one process, whatever SLURM_NTASKS says
    assert ProcessInfo.from_environ({"SLURM_NTASKS": "8", "SLURM_PROCID": "0"}).world_size == 1
    mpi = ProcessInfo.from_environ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    assert (mpi.rank, mpi.world_size, mpi.local_rank) == (1, 2, 1)


@pytest.mark.parametrize(
    ("env", "error", "words"),
    [
        ({"WORLD_SIZE": "two"}, ConfigurationError, "WORLD_SIZE='two'"),
        ({"WORLD_SIZE": "2"}, DistributedSetupError, "no rank"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, DistributedSetupError, "outside the world"),
        ({"WORLD_SIZE": "0", "RANK": "0"}, DistributedSetupError, "at least 1"),
    ],
)
def test_process_info_rejects_broken_variables(env: dict[str, str], error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        ProcessInfo.from_environ(env)


def test_partial_state_single_process() -> None:
    state = PartialState(cpu=True)
    assert is_initialized()
    assert (state.process_index, state.num_processes, state.local_process_index) == (0, 1, 0)
    assert state.device == torch.device("cpu")
    assert state.distributed_type == DistributedType.NO and not state.use_distributed
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    state.wait_for_everyone()  # no-op, must not need a process group
    with state.main_process_first():
        pass
    with state.split_between_processes([1, 2, 3]) as part:
        assert part == [1, 2, 3]
    assert state.on_process(lambda: 5, process_index=0)() == 5
    assert state.on_process(process_index=1)(lambda: 5)() is None
    assert DistributedType.MULTI_GPU == "MULTI_GPU"


def test_split_between_processes_shares_and_pads() -> None:
    items = list(range(7))
    parts = [_split(items, 3, i, False) for i in range(3)]
    assert parts == [[0, 1, 2], [3, 4], [5, 6]]
    assert [_split(items, 3, i, True) for i in range(3)] == [[0, 1, 2], [3, 4, 6], [5, 6, 6]]
    assert _split((1, 2, 3), 2, 1, True) == (3, 3)
    assert _split(torch.arange(6).reshape(3, 2), 2, 1, True).tolist() == [[4, 5], [4, 5]]
    assert _split({"a": [1, 2], "b": "xy"}, 2, 1, False) == {"a": [2], "b": "y"}
    with pytest.raises(ConfigurationError, match="different lengths"):
        _split({"a": [1, 2], "b": [1]}, 2, 0, False)
    with pytest.raises(ConfigurationError, match="cannot split a int"):
        _split(5, 2, 0, False)


def test_gradient_state_boundaries() -> None:
    gs = GradientState(num_steps=3)
    pattern = [gs.advance(end_of_dataloader=(i == 6)) for i in range(7)]
    assert pattern == [False, False, True, False, False, True, True]
    assert gs.step == 0  # the end of the loader restarts the count


BROKEN = textwrap.dedent(
    """
    import os, socket, time
    from datetime import timedelta
    from accelify.runtime import Accelerator, DistributedSetupError, InitProcessGroupKwargs

    os.environ.update(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
    for k in ("MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(k, None)
    try:
        Accelerator()
    except DistributedSetupError as exc:
        assert "MASTER_ADDR" in str(exc) and "accelify launch" in str(exc), exc
        print("NO-MASTER-ERROR")
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    start = time.time()
    try:
        Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=1))])
    except DistributedSetupError as exc:
        assert "could not join" in str(exc) and "does not train alone" in str(exc), exc
        print("NO-PEER-ERROR", round(time.time() - start))
    """
)


@pytest.mark.multiprocess
def test_broken_environment_fails_loudly(clean_env) -> None:  # type: ignore[no-untyped-def]
    """WORLD_SIZE=2 without MASTER_ADDR, then without a peer: DistributedSetupError, never a lone run."""
    proc = subprocess.run(
        [sys.executable, "-c", BROKEN], capture_output=True, text=True, timeout=120, env=clean_env(None)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NO-MASTER-ERROR" in proc.stdout and "NO-PEER-ERROR" in proc.stdout, proc.stdout + proc.stderr


def test_gradient_state_describes_the_active_loader() -> None:
    """Hugging Face scripts read ``accelerator.gradient_state.end_of_dataloader``; it follows the loader."""
    from torch.utils.data import DataLoader

    from accelify.runtime import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(range(5), batch_size=2))
    gs = accelerator.gradient_state
    assert (gs.in_dataloader, gs.end_of_dataloader, gs.active_dataloader) == (False, False, None)
    seen = [(b.tolist(), gs.in_dataloader, gs.end_of_dataloader, gs.remainder) for b in loader]
    assert seen == [([0, 1], True, False, -1), ([2, 3], True, False, -1), ([4], True, True, 0)]
    assert not gs.in_dataloader
