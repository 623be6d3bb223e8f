"""Every visible GPU: NCCL and DDP through ``prepare`` on all of them; FSDP2 on 2.

Skipped without CUDA (tests/conftest.py) and below 2 GPUs (a process group needs 2 processes). Each worker
runs once under ``accelify launch --multi_gpu`` and reports every check per process; each test asserts one.
"""

from __future__ import annotations

import pytest
from gpu_runs import GPU_COUNT, Checks, launch, needs_two_gpus

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess, needs_two_gpus]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Checks:
    folder = tmp_path_factory.mktemp("ddp-nccl")
    return Checks(folder, launch("ddp_nccl.py", str(folder), processes=GPU_COUNT), processes=GPU_COUNT)


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory: pytest.TempPathFactory) -> Checks:
    folder = tmp_path_factory.mktemp("fsdp2")
    return Checks(folder, launch("fsdp2.py", str(folder), processes=2, launch_args=("--use_fsdp",)), processes=2)


@pytest.mark.parametrize("check", ["process group", "device per process", "DDP through prepare",
                                   "trains like one process", "data sharded and pinned", "parameters agree",
                                   "collectives", "checkpoint round trip"])
def test_nccl_and_ddp_on_every_visible_gpu(ddp: Checks, check: str) -> None:
    ddp.expect(check)


def test_every_process_ended_cleanly(ddp: Checks) -> None:
    assert ddp.proc.returncode == 0, ddp.proc.stderr[-4000:]
    assert f"{GPU_COUNT} processes x 1 machine, cuda (nccl)" in ddp.proc.stderr


@pytest.mark.parametrize("check", ["sharded by prepare", "trains like one GPU", "checkpoint round trip", "bf16"])
def test_fsdp2_on_two_gpus(fsdp: Checks, check: str) -> None:
    fsdp.expect(check)
