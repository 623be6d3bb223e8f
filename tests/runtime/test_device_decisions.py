"""Every choice the runtime makes from the device situation, decided from plain facts (no GPU, nothing mocked).

The functions under test take the facts as arguments (:class:`DeviceFacts`, a local rank, a precision, what
torch's autocast runs); the runtime reads those facts from torch in one place (``read_device_facts``) and
hands them over. So a GPU machine's decisions are checked here on a CPU machine, and the GPU suite
(``tests/gpu``) checks that the facts read on a real GPU lead to the same decisions.
"""

from __future__ import annotations

import pytest
import torch

from accelify.envinfo import EnvFacts, env_rows
from accelify.runtime import precision
from accelify.runtime.devices import (
    NCCL_WITH_GLOO,
    DeviceFacts,
    GpuFacts,
    default_device,
    default_process_count,
    loader_transfer,
    process_device,
    process_group_backend,
    processes_fit,
    read_device_facts,
    selected_gpus,
    uses_cuda,
    visible_devices,
)
from accelify.runtime.errors import ConfigurationError, DistributedSetupError
from accelify.runtime.memory import is_out_of_memory
from accelify.runtime.precision_rules import PRECISION_DTYPES, dtype_name, grad_scaler_plan, precision_allowed

TWO_GPUS = DeviceFacts(cuda_available=True, gpu_count=2, nccl_available=True, gloo_available=True)
CPU_ONLY = DeviceFacts(cuda_available=False, gpu_count=0, nccl_available=False, gloo_available=True)
MAC = DeviceFacts(mps_available=True)


@pytest.mark.parametrize(
    ("facts", "cpu", "local_rank", "world", "expected"),
    [
        (TWO_GPUS, False, 0, 2, ("cuda", 0)),
        (TWO_GPUS, False, 1, 2, ("cuda", 1)),  # one GPU per process, by local rank
        (TWO_GPUS, False, 1, 4, ("cuda", 1)),  # rank 3 of 4 on the second machine: local rank 1
        (TWO_GPUS, True, 1, 2, ("cpu", None)),  # cpu=True wins over GPUs
        (CPU_ONLY, False, 0, 2, ("cpu", None)),
        (MAC, False, 0, 1, ("mps", None)),  # Apple's GPU for one process
        (MAC, False, 0, 2, ("cpu", None)),  # ... but it has no collectives
    ],
)
def test_which_device_each_process_uses(facts, cpu, local_rank, world, expected) -> None:
    assert process_device(facts, cpu=cpu, local_rank=local_rank, world_size=world) == expected


def test_more_processes_than_gpus_is_an_error_not_a_shared_gpu() -> None:
    with pytest.raises(DistributedSetupError, match="Local rank 2 needs GPU 2, but only 2 are visible; start at most 2"):
        process_device(TWO_GPUS, cpu=False, local_rank=2, world_size=3)


@pytest.mark.parametrize(
    ("facts", "cpu", "requested", "expected"),
    [
        (TWO_GPUS, False, None, NCCL_WITH_GLOO),  # NCCL for CUDA tensors, Gloo for the object collectives
        (TWO_GPUS, True, None, "gloo"),
        (CPU_ONLY, False, None, "gloo"),
        (DeviceFacts(cuda_available=True, gpu_count=1, nccl_available=False), False, None, "gloo"),  # no NCCL built
        (DeviceFacts(cuda_available=True, gpu_count=1, nccl_available=True, gloo_available=False), False, None, "nccl"),
        (TWO_GPUS, False, "gloo", "gloo"),  # InitProcessGroupKwargs(backend=...) wins
    ],
)
def test_nccl_or_gloo(facts, cpu, requested, expected) -> None:
    assert process_group_backend(facts, cpu=cpu, requested=requested) == expected


def test_no_backend_at_all_says_what_to_install() -> None:
    with pytest.raises(DistributedSetupError, match="no Gloo backend, so processes cannot join"):
        process_group_backend(DeviceFacts(gloo_available=False), cpu=True)


def test_cuda_is_used_only_when_usable_and_not_refused() -> None:
    assert uses_cuda(TWO_GPUS, cpu=False) and not uses_cuda(TWO_GPUS, cpu=True)
    assert not uses_cuda(CPU_ONLY, cpu=False)
    assert not uses_cuda(DeviceFacts(cuda_available=True, gpu_count=0), cpu=False)


def test_what_a_launch_uses_by_default() -> None:
    assert (default_device(0), default_device(4)) == ("cpu", "cuda")
    assert (default_process_count("cuda", 4), default_process_count("cpu", 4), default_process_count("cuda", 0)) == (4, 1, 1)
    assert processes_fit(2, "cuda", 2) and not processes_fit(3, "cuda", 2) and processes_fit(16, "cpu", 0)


def test_what_launch_gpu_ids_sets() -> None:
    assert selected_gpus("all", 4, "command line") is None
    assert selected_gpus("1,3", 4, "command line") == (1, 3)
    with pytest.raises(ConfigurationError, match="command line: GPU 5 does not exist; this machine has 2 visible GPU"):
        selected_gpus("0,5", 2, "command line")
    # the workers' CUDA_VISIBLE_DEVICES: the ids count among the GPUs the launcher sees
    assert visible_devices((1, 3), None) == "1,3"
    assert visible_devices((1, 3), "4,5,6,7") == "5,7"
    assert visible_devices((0,), "GPU-1a2b,GPU-3c4d") == "GPU-1a2b"  # UUIDs pass through as they are
    assert visible_devices((0, 1), " 2 , 3 ") == "2,3"


@pytest.mark.parametrize(
    ("device", "pin", "non_blocking", "expected"),
    [
        ("cuda", True, True, (True, True)),
        ("cuda", True, False, (True, False)),
        ("cuda", False, True, (False, False)),  # a copy from pageable memory is synchronous anyway
        ("cpu", True, True, (False, False)),  # pinning only helps copies to a GPU (torch warns on CPU)
        (None, True, True, (True, False)),  # batches not placed: pinned as asked, nothing to copy
        ("mps", True, True, (True, False)),
    ],
)
def test_pin_memory_and_non_blocking(device, pin, non_blocking, expected) -> None:
    assert loader_transfer(device, pin, non_blocking) == expected


def test_bf16_and_fp16_support() -> None:
    assert precision_allowed("bf16", "cuda", autocast_runs=True, gpu_bf16=True) == "bf16"
    assert precision_allowed("bf16", "cuda", autocast_runs=True, gpu_bf16=None) == "bf16"  # a launcher: not probed
    with pytest.raises(ConfigurationError, match="'bf16' needs a GPU with bfloat16 support; Tesla T4 has none. "
                                                 "Use mixed_precision='fp16'"):
        precision_allowed("bf16", "cuda", autocast_runs=True, gpu_bf16=False, gpu_name="Tesla T4")
    assert precision_allowed("fp16", "cuda", autocast_runs=True, gpu_bf16=False) == "fp16"
    assert precision_allowed("fp16", "cpu", autocast_runs=True) == "fp16"  # torch >= 2.4 autocasts fp16 on CPU
    with pytest.raises(ConfigurationError, match="'fp16' is not supported on the cpu device by torch 2.3.*bf16' or 'no'"):
        precision_allowed("fp16", "cpu", autocast_runs=False, torch_version="2.3")
    assert precision_allowed("no", "cuda", autocast_runs=False, gpu_bf16=False) == "no"


def test_grad_scaler_only_for_fp16_with_its_settings() -> None:
    assert grad_scaler_plan("fp16", "cuda") == {"device": "cuda"}
    assert grad_scaler_plan("fp16", "cpu", {"init_scale": 1024.0, "growth_interval": 10}) == {
        "device": "cpu", "init_scale": 1024.0, "growth_interval": 10}
    assert grad_scaler_plan("bf16", "cuda") is None and grad_scaler_plan("no", "cuda") is None
    scaler = precision.make_grad_scaler("fp16", torch.device("cpu"), {"init_scale": 8.0})  # what the runtime builds
    assert scaler.get_scale() == 8.0 and precision.make_grad_scaler("bf16", torch.device("cpu")) is None


def test_one_precision_to_dtype_table() -> None:
    """Autocast (precision.py) and FSDP's mixed-precision policy (fsdp.py) both read PRECISION_DTYPES."""
    from accelify.runtime.fsdp import _mp_policy

    assert precision.DTYPES == {"fp16": torch.float16, "bf16": torch.bfloat16}
    assert all(precision.torch_dtype(k) is getattr(torch, v) for k, v in PRECISION_DTYPES.items())
    assert dtype_name("BF16") == dtype_name("bfloat16") == "bfloat16" and dtype_name("no") is None
    assert _mp_policy("bfloat16").param_dtype is _mp_policy("bf16").param_dtype is torch.bfloat16


@pytest.mark.parametrize(
    ("error", "is_oom"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                "79.19 GiB of which 1.06 GiB is free."), True),
        (RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"), True),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
        (RuntimeError("CUDA error: device-side assert triggered"), False),
        (RuntimeError("Expected all tensors to be on the same device, but found cuda:0 and cpu"), False),
    ],
)
def test_which_cuda_errors_the_batch_size_finder_treats_as_out_of_memory(error: BaseException, is_oom: bool) -> None:
    assert is_out_of_memory(error) is is_oom


def test_what_accelify_env_reports_for_a_gpu_machine() -> None:
    facts = EnvFacts(
        accelify="0.1.0", python="3.11.9", platform="Linux-6.8-x86_64", cpu_cores=16, torch="2.13.0+cu128",
        cuda_build="12.8", devices=TWO_GPUS, nccl_version="2.27.3", cuda_visible_devices="2,3",
        gpus=(GpuFacts(0, "NVIDIA H100 80GB HBM3", 85_031_714_816, True),
              GpuFacts(1, "Tesla T4", 15_642_329_088, False)),
        variables=(("ACCELIFY_MIXED_PRECISION", "bf16"),),
    )
    rows = dict(env_rows(facts))
    assert rows["CUDA (torch built with)"] == "12.8" and rows["CUDA available"] == "True"
    assert rows["NCCL"] == "2.27.3" and rows["GPUs"] == "2" and rows["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert rows["GPU 0"] == "NVIDIA H100 80GB HBM3, 79.2 GiB, bf16 yes" and rows["GPU 1"] == "Tesla T4, 14.6 GiB, bf16 no"
    assert rows["NCCL backend"] == "True" and rows["ACCELIFY_*/ACCELERATE_* variables"] == "ACCELIFY_MIXED_PRECISION=bf16"
    cpu = dict(env_rows(EnvFacts(accelify="0.1.0", python="3.11", platform="p", cpu_cores=2, torch="2.13.0+cpu",
                                 devices=CPU_ONLY)))
    assert (cpu["CUDA (torch built with)"], cpu["NCCL"], cpu["GPUs"], cpu["CUDA_VISIBLE_DEVICES"]) == (
        "none", "not available", "0", "not set")
    assert "GPU 0" not in cpu and cpu["ACCELIFY_*/ACCELERATE_* variables"] == "none"
    broken = dict(env_rows(EnvFacts(accelify="0.1.0", python="3.11", platform="p", cpu_cores=2, torch=None,
                                    torch_problem="No module named 'torch'")))
    assert broken["torch"] == "not importable (No module named 'torch')"
    nccl_unknown = dict(env_rows(EnvFacts(accelify="x", python="x", platform="x", cpu_cores=1, torch="x",
                                          devices=TWO_GPUS, nccl_version="")))
    assert nccl_unknown["NCCL"] == "available, version unknown"


def test_the_runtime_decides_from_the_facts_it_reads() -> None:
    """This machine's facts, read once, lead the process state to the decision the function gives."""
    from accelify.runtime.state import PartialState

    facts = read_device_facts()
    assert facts.gpu_count == torch.cuda.device_count() and facts.gloo_available
    kind, index = process_device(facts, cpu=False, local_rank=0, world_size=1)
    state = PartialState(cpu=False)
    assert (state.device.type, state.device.index) == (kind, index)


def test_a_launch_plan_puts_each_process_on_its_own_selected_gpu(tmp_path) -> None:
    """From the launch plan to each worker's device: --gpu-ids 1,3 on a 4-GPU machine whose launcher sees GPUs 4-7."""
    from accelify.launch.plan import LaunchOptions, resolve_plan

    environ = {"XDG_CONFIG_HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    plan = resolve_plan(LaunchOptions(script="train.py", gpu_ids="1,3"), environ=environ, gpu_count=4)
    assert (plan.nproc_per_machine, plan.device, plan.backend) == (2, "cuda", "nccl")
    visible = plan.worker_env("launch.yaml")["CUDA_VISIBLE_DEVICES"]
    assert visible == "5,7"
    worker = DeviceFacts(cuda_available=True, gpu_count=len(visible.split(",")), nccl_available=True)
    placed = [process_device(worker, cpu=False, local_rank=r, world_size=plan.world_size)
              for r in range(plan.nproc_per_machine)]
    assert placed == [("cuda", 0), ("cuda", 1)]  # physical GPUs 5 and 7
    assert process_group_backend(worker, cpu=False) == NCCL_WITH_GLOO
