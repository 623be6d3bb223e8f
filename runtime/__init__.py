"""accelify.runtime: the distributed engine converted scripts import.

API-compatible with Hugging Face Accelerate (a converted script runs under either library with
only the import line changed), built on torch.distributed, DDP, FSDP2 and torch.distributed.run.

Public names load lazily from the module that owns them (the table below), so importing this
package costs little more than importing torch, loads no libcst/click/rich, and has no side effects.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module (relative to this package) that defines it
_EXPORTS: dict[str, str] = {
    # process state and the facade
    "Accelerator": "accelerator",
    "PartialState": "state",
    "AcceleratorState": "state",
    "DistributedType": "state",
    "ProcessInfo": "process_group",
    "GradientState": "gradient_state",
    "UnusedParametersError": "errors",
    # data loading
    "DataLoaderShard": "data_loader_shard",
    "prepare_data_loader": "data_loader",
    "skip_first_batches": "data_loader",
    # wrappers
    "AcceleratedOptimizer": "optimizer",
    "AcceleratedScheduler": "scheduler",
    # collectives
    "gather": "ops",
    "gather_object": "ops",
    "reduce": "ops",
    "broadcast": "ops",
    "broadcast_object_list": "ops",
    "pad_across_processes": "ops",
    # utilities
    "set_seed": "seed",
    "get_logger": "logging",
    "DistributedDataParallelKwargs": "kwargs",
    "GradScalerKwargs": "kwargs",
    "InitProcessGroupKwargs": "kwargs",
    "AutocastKwargs": "kwargs",
    "find_executable_batch_size": "memory",
    "release_memory": "memory",
    "clear_device_cache": "memory",
    "ProjectConfiguration": "checkpoint",
    "FullyShardedDataParallelPlugin": "fsdp",
    "GeneralTracker": "tracking",
    "JSONLTracker": "tracking",
    "TensorBoardTracker": "tracking",
    "notebook_launcher": "launch",
    "debug_launcher": "launch",
    "write_basic_config": "config",
    "LaunchSettings": "launch_settings",
    "load_launch_settings": "launch_settings",
    # errors
    "AccelifyRuntimeError": "errors",
    "ConfigurationError": "errors",
    "DistributedSetupError": "errors",
    "DistributedOperationException": "errors",
    "CheckpointError": "errors",
    "ParametersDifferError": "errors",
    "SentinelWarning": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        imported = importlib.import_module(f".{module}", __name__)
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        import sys

        raise ModuleNotFoundError(
            f"accelify.runtime.{name} needs PyTorch, which is not installed in this environment "
            f"({sys.executable}): install it with `pip install \"accelify[torch]\"` (or the torch "
            "build you want, https://pytorch.org). Converting scripts (`accelify convert`, `accelify migrate`, "
            "the pre-commit hooks) works without it.",
            name="torch",
        ) from None
    value = getattr(imported, name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
