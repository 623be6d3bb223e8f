"""One GPU: the device decisions on real hardware, prepare, fp16 overflow, bf16, CUDA out-of-memory, checkpoints.

Skipped without CUDA (tests/conftest.py). One run of ``workers/single_gpu.py`` reports every check; each test
below asserts one of them. ``accelify test --gpu`` runs this folder and the CUDA step-overhead benchmark.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_runs import Checks, gpu_env, needs_two_gpus, python

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> Checks:
    folder = tmp_path_factory.mktemp("one-gpu")
    return Checks(folder, python("single_gpu.py", str(folder)), processes=1)


def test_facts_and_decisions_on_a_real_gpu(checks: Checks) -> None:
    checks.expect("facts and decisions")


def test_prepare_places_model_optimizer_and_pinned_batches_on_the_gpu(checks: Checks) -> None:
    checks.expect("prepare places on the GPU")


def test_fp16_overflow_skips_the_step_and_lowers_the_scale(checks: Checks) -> None:
    checks.expect("fp16 overflow")


def test_fp16_overflow_is_handled_as_hugging_face_accelerate_does(checks: Checks) -> None:
    checks.expect("fp16 overflow like Accelerate")


def test_bf16_runs_the_inner_layers_in_bf16(checks: Checks) -> None:
    checks.expect("bf16 inner layers")


def test_a_real_cuda_out_of_memory_halves_the_batch_and_frees_the_memory(checks: Checks) -> None:
    checks.expect("out-of-memory halving")


def test_a_gpu_checkpoint_loads_on_the_cpu(checks: Checks) -> None:
    checks.expect("checkpoint GPU to CPU")


def test_a_cpu_checkpoint_loads_on_the_gpu_with_map_location(checks: Checks) -> None:
    checks.expect("checkpoint CPU to GPU")


@needs_two_gpus
def test_a_checkpoint_from_the_first_gpu_loads_on_the_second(checks: Checks, tmp_path: Path) -> None:
    checks.expect("checkpoint GPU to CPU")  # wrote gpu_checkpoint on cuda:0
    source = Path(checks.folder) / "gpu_checkpoint"
    env = gpu_env(WORLD_SIZE="1", RANK="0", LOCAL_RANK="1", LOCAL_WORLD_SIZE="1")  # one process, on the second GPU
    second = Checks(tmp_path, python("single_gpu.py", str(tmp_path), "--load-from", str(source), env=env), processes=1)
    second.expect("checkpoint from another GPU")
