"""What a bug report needs: versions, platform, devices, backends and the config file in use.

Two steps, so the report itself is tested with plain inputs: :func:`read_env_facts` is the one place that
asks (torch, through the runtime's :func:`~accelify.runtime.devices.read_device_facts` and
:func:`~accelify.runtime.devices.read_gpu`; the package versions; the environment), and :func:`env_rows`
turns those facts into the report's lines. ``collect_env()`` does both and adds the config file;
``accelify env`` prints it. Nothing here raises for a missing piece: an unknown value is reported as such,
so the report is always complete.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from accelify import __version__


@dataclass(frozen=True)
class EnvFacts:
    """What the report says, as read (see :func:`read_env_facts`); ``torch`` is None when torch cannot be imported."""

    accelify: str
    python: str
    platform: str
    cpu_cores: int | None
    torch: str | None
    torch_problem: str = ""  # why torch could not be imported
    cuda_build: str | None = None  # the CUDA torch was built with
    devices: Any = None  # accelify.runtime.devices.DeviceFacts
    gpus: tuple[Any, ...] = ()  # accelify.runtime.devices.GpuFacts, one per visible GPU
    nccl_version: str | None = None  # None: not available; "" when available but its version is unknown
    cuda_visible_devices: str | None = None
    accelerate: str = "not installed"
    variables: tuple[tuple[str, str], ...] = ()  # ACCELIFY_* / ACCELERATE_* set


def env_rows(facts: EnvFacts) -> tuple[tuple[str, str], ...]:
    """The report's ``(name, value)`` lines for ``facts``, in order."""
    rows = [("accelify", facts.accelify), ("Python", facts.python), ("platform", facts.platform),
            ("CPU cores", str(facts.cpu_cores))]
    if facts.torch is None:
        rows.append(("torch", f"not importable ({facts.torch_problem})"))
    else:
        devices = facts.devices
        nccl = "not available" if facts.nccl_version is None else facts.nccl_version or "available, version unknown"
        rows += [("torch", facts.torch), ("CUDA (torch built with)", facts.cuda_build or "none"),
                 ("CUDA available", str(devices.cuda_available)), ("NCCL", nccl), ("GPUs", str(devices.gpu_count))]
        for gpu in facts.gpus:
            rows.append((f"GPU {gpu.index}", f"{gpu.name}, {gpu.total_memory / 2**30:.1f} GiB, "
                                             f"bf16 {'yes' if gpu.bf16 else 'no'}"))
        rows += [("CUDA_VISIBLE_DEVICES", "not set" if facts.cuda_visible_devices is None else facts.cuda_visible_devices),
                 ("Gloo backend", str(devices.gloo_available)), ("NCCL backend", str(devices.nccl_available))]
    rows.append(("accelerate (Hugging Face)", facts.accelerate))
    rows.append(("ACCELIFY_*/ACCELERATE_* variables", ", ".join(f"{k}={v}" for k, v in facts.variables) or "none"))
    return tuple(rows)


def _package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def read_env_facts(environ: Mapping[str, str] | None = None) -> EnvFacts:
    """Read the facts the report needs (initialises CUDA to read each GPU's properties)."""
    env = os.environ if environ is None else environ
    common: dict[str, Any] = dict(
        accelify=__version__, python=sys.version.split()[0], platform=platform.platform(), cpu_cores=os.cpu_count(),
        accelerate=_package_version("accelerate"), cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        variables=tuple((k, env[k]) for k in sorted(k for k in env if k.startswith(("ACCELIFY_", "ACCELERATE_")))),
    )
    try:
        import torch

        from accelify.runtime.devices import read_device_facts, read_gpu
    except ImportError as exc:  # the report must still come out
        return EnvFacts(torch=None, torch_problem=str(exc), **common)
    devices = read_device_facts()
    nccl = None
    if devices.cuda_available and devices.nccl_available:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # a broken NCCL install is itself worth reporting
            nccl = ""
    gpus = tuple(read_gpu(index) for index in range(devices.gpu_count))
    return EnvFacts(torch=torch.__version__, cuda_build=torch.version.cuda, devices=devices, gpus=gpus,
                    nccl_version=nccl, **common)


@dataclass(frozen=True)
class EnvReport:
    """``info``: ordered (name, value) pairs; ``config_path``/``config``: the config file in use, if any."""

    info: tuple[tuple[str, str], ...]
    config_path: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    config_problem: str | None = None

    def as_text(self) -> str:
        """The report as a Markdown list, ready to paste into an issue."""
        lines = [f"- {name}: {value}" for name, value in self.info]
        if self.config_problem:
            lines.append(f"- config file: {self.config_path} ({self.config_problem})")
        elif self.config_path:
            lines.append(f"- config file: {self.config_path}")
            lines += [f"\t- {key}: {value}" for key, value in self.config.items()]
        else:
            lines.append("- config file: none (defaults apply)")
        return "\n".join(lines)


def collect_env(config_file: str | None = None, environ: Mapping[str, str] | None = None) -> EnvReport:
    """Gather the report; ``config_file`` as for ``accelify launch --config-file``."""
    from accelify.runtime.config import find_config_file, load_config
    from accelify.runtime.errors import ConfigurationError

    env = os.environ if environ is None else environ
    info = env_rows(read_env_facts(env))
    try:
        path = find_config_file(config_file, env)
    except ConfigurationError as exc:
        return EnvReport(info, config_path=config_file, config_problem=str(exc))
    if path is None:
        return EnvReport(info)
    try:
        loaded = load_config(path)
    except ConfigurationError as exc:
        return EnvReport(info, config_path=str(path), config_problem=f"invalid: {exc}")
    return EnvReport(info, config_path=str(path), config=dict(loaded.raw))
