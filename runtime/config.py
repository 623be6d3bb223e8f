"""The user's launch configuration file: find it, load and validate it, write it.

The file is YAML (JSON is valid YAML) with Hugging Face Accelerate's keys, so an existing
``~/.cache/huggingface/accelerate/default_config.yaml`` works as it is with ``--config-file``.
Only ``accelify launch``/``config``/``env``/``test`` read it; a training process never does
(the launcher hands its resolved settings over through :mod:`accelify.runtime.launch_settings`).

Where the file is looked for, first match wins:

1. an explicit path (``--config-file``); it must exist;
2. ``ACCELIFY_CONFIG_FILE``, then Hugging Face's ``ACCELERATE_CONFIG_FILE``; the file must exist;
3. ``$XDG_CONFIG_HOME/accelify/config.yaml`` (``~/.config/accelify/config.yaml``), if it exists.

Keys that change what runs: ``num_processes`` (in total, over all machines, as in Accelerate),
``num_machines``, ``machine_rank``, ``main_process_ip``, ``main_process_port``, ``gpu_ids``,
``use_cpu``, ``distributed_type`` (``NO``, ``MULTI_CPU``, ``MULTI_GPU``, ``FSDP``),
``mixed_precision``, ``debug``, ``rdzv_backend``, ``fsdp_config``, and accelify's own
``gradient_accumulation_steps``, ``use_fsdp``, ``max_restarts``, ``monitor_interval``.
Accelerate's other keys (``compute_environment: LOCAL_MACHINE``, ``same_network``,
``downcast_bf16``, ``main_training_function``, ``enable_cpu_affinity``, ``tpu_*``, ...) are
accepted and have no effect. Unknown keys are reported by name in ``UserConfig.warnings``;
invalid values raise :class:`~accelify.runtime.errors.ConfigurationError` naming key, value and
what is allowed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .devices import default_device, default_process_count
from .errors import ConfigurationError
from .files import atomic_write
from .launch_options import (  # noqa: F401  (DISTRIBUTED_TYPES, RDZV_BACKENDS: this module's older names)
    BY_CONFIG_KEY,
    DISTRIBUTED_TYPES,
    OPTIONS,
    RDZV_BACKENDS,
    check_machine_rank,
)
from .precision_rules import check_mixed_precision

CONFIG_FILE_VARS = ("ACCELIFY_CONFIG_FILE", "ACCELERATE_CONFIG_FILE")

# Accelerate keys accepted for compatibility that change nothing here.
_ACCEPTED_NO_EFFECT = frozenset(
    {
        "same_network", "downcast_bf16", "main_training_function",
        "enable_cpu_affinity", "dynamo_config", "fp8_config", "ipex_config", "mpirun_config",
        "parallelism_config", "megatron_lm_config", "deepspeed_config", "command_file", "commands",
        "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "tpu_vm", "tpu_env",
        "use_mps_device", "num_cpu_threads_per_process",
    }
)


@dataclass(frozen=True)
class UserConfig:
    """A validated config file. Fields are ``None`` where the file does not set them."""

    path: str | None = None
    num_processes: int | None = None
    num_machines: int | None = None
    machine_rank: int | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    gpu_ids: str | None = None
    use_cpu: bool | None = None
    distributed_type: str | None = None
    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    debug: bool | None = None
    rdzv_backend: str | None = None
    use_fsdp: bool | None = None
    fsdp_config: Mapping[str, Any] = field(default_factory=dict)
    max_restarts: int | None = None
    monitor_interval: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/accelify/config.yaml``, else ``~/.config/accelify/config.yaml``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "accelify" / "config.yaml"


def config_file_location(explicit: str | os.PathLike[str] | None = None,
                         environ: Mapping[str, str] | None = None) -> tuple[str, Path]:
    """Where the config file is read from and written to, as ``(source, path)``.

    ``source`` is ``"--config-file"``, the environment variable's name, or ``"default"`` for the
    user folder; the order is the module docstring's. Whether the file exists is not checked.
    """
    env = os.environ if environ is None else environ
    if explicit is not None:
        return "--config-file", Path(os.fspath(explicit))
    for var in CONFIG_FILE_VARS:
        if env.get(var):
            return var, Path(env[var])
    return "default", default_config_path(env)


def find_config_file(explicit: str | os.PathLike[str] | None = None,
                     environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file in use (see the module docstring), or ``None`` when there is none.

    A file named explicitly or by an environment variable must exist; otherwise this raises
    ``ConfigurationError`` rather than silently running without it.
    """
    source, path = config_file_location(explicit, environ)
    if source == "default":
        return path if path.is_file() else None
    if not path.is_file():
        raise ConfigurationError(
            f"{source} names {path}, which does not exist; create it with `accelify config` "
            "(or `accelify config default`) or point to an existing file."
        )
    return path


KNOWN_KEYS = frozenset(BY_CONFIG_KEY) | _ACCEPTED_NO_EFFECT


def _unknown_key(where: str, key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, sorted(KNOWN_KEYS), n=1)
    hint = f"did you mean {close[0]!r}?" if close else "it is not one of Accelerate's or accelify's config keys"
    return f"{where}: unknown key {key!r} ignored; {hint}"


def parse_config(data: Mapping[str, Any], where: str = "config") -> UserConfig:
    """Validate a config mapping (already parsed from YAML); ``where`` prefixes error messages.

    >>> parse_config({"num_processes": 2, "use_cpu": True, "tpu_name": None}).num_processes
    2
    """
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{where}: a config file must be a YAML mapping of keys to values.")
    values: dict[str, Any] = {}
    warnings = [_unknown_key(where, str(key)) for key in data if key not in KNOWN_KEYS]
    for key, option in BY_CONFIG_KEY.items():  # the launch options' table: one check per key
        value = data.get(key)
        if value is None or (key == "num_processes" and value == -1):  # -1: Accelerate's "not set"
            continue
        checked = option.validate(value, where)
        if key != "compute_environment":  # accepted (LOCAL_MACHINE only), changes nothing
            values[key] = checked
    if values.get("distributed_type") == "FSDP" and "use_fsdp" not in values:
        values["use_fsdp"] = True
    if values.get("distributed_type") == "MULTI_CPU" and "use_cpu" not in values:
        values["use_cpu"] = True
    if values.get("use_cpu") and values.get("mixed_precision", "no") != "no":
        check_mixed_precision(values["mixed_precision"], "cpu", where)  # the launch rule, as `accelify launch` applies it
    check_machine_rank(values.get("machine_rank", 0), values.get("num_machines", 1), where)
    return UserConfig(raw=dict(data), warnings=tuple(warnings), **values)


def load_config(path: str | os.PathLike[str] | None) -> UserConfig:
    """Load and validate the file at ``path``; ``None`` gives an empty config (nothing set)."""
    if path is None:
        return UserConfig()
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigurationError(f"{path}: cannot read the config file ({exc.strerror}).") from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{path}: not valid YAML ({exc}); fix it or recreate it with `accelify config`.") from exc
    config = parse_config(data or {}, str(path))
    return UserConfig(**{**config.__dict__, "path": os.fspath(path)})


def write_config(data: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate ``data`` and write it to ``path`` as YAML, atomically (a temp file renamed over it)."""
    import yaml

    parse_config(data, os.fspath(path))
    target = Path(path)

    def dump(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            yaml.safe_dump(dict(data), fh, sort_keys=False)

    atomic_write(target, dump, durable=False)
    return target


def make_config(*, cpu: bool, num_processes: int = 1, num_machines: int = 1, machine_rank: int = 0,
                main_process_ip: str | None = None, main_process_port: int | None = None,
                gpu_ids: str = "all", mixed_precision: str = "no", use_fsdp: bool = False,
                debug: bool = False, rdzv_backend: str = OPTIONS["rdzv_backend"].default) -> dict[str, Any]:
    """A config mapping with only Accelerate's keys (so both libraries read it) for these choices.

    >>> make_config(cpu=True, num_processes=2)["distributed_type"]
    'MULTI_CPU'
    """
    if use_fsdp:
        kind = "FSDP"
    elif num_processes > 1:
        kind = "MULTI_CPU" if cpu else "MULTI_GPU"
    else:
        kind = "NO"
    data: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": kind, "num_processes": num_processes,
        "num_machines": num_machines, "machine_rank": machine_rank, "use_cpu": cpu,
        "mixed_precision": mixed_precision, "debug": debug, "rdzv_backend": rdzv_backend,
    }
    if not cpu:
        data["gpu_ids"] = gpu_ids
    if num_machines > 1:
        data.update(main_process_ip=main_process_ip, main_process_port=main_process_port, same_network=True)
    parse_config(data, "make_config")
    return data


def basic_config(mixed_precision: str = "no", gpu_count: int | None = None) -> dict[str, Any]:
    """The config ``write_basic_config`` writes: every visible GPU, else one CPU process."""
    if gpu_count is None:
        import torch

        gpu_count = torch.cuda.device_count()
    device = default_device(gpu_count)
    return make_config(cpu=device == "cpu", num_processes=default_process_count(device, gpu_count),
                       mixed_precision=mixed_precision)


def write_basic_config(mixed_precision: str = "no",
                       save_location: str | os.PathLike[str] | None = None) -> Path | bool:
    """Write a config for this machine (all GPUs, else one CPU process) and return its path.

    Like Accelerate's, it never overwrites: it returns ``False`` when the file already exists.
    ``save_location`` defaults to :func:`default_config_path`; pass it to ``--config-file`` or
    ``ACCELIFY_CONFIG_FILE`` if elsewhere. With two GPUs, ``write_basic_config("fp16")`` writes
    ``num_processes: 2``, ``distributed_type: MULTI_GPU``, ``mixed_precision: fp16``.
    """
    precision = OPTIONS["mixed_precision"].validate(mixed_precision, "write_basic_config")
    path = Path(save_location) if save_location is not None else default_config_path()
    if path.exists():
        return False
    return write_config(basic_config(precision), path)
