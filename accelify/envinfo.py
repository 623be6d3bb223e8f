"""What a bug report needs: versions, platform, devices, backends and the config file in use.

``collect_env()`` returns plain data; ``accelify env`` prints it. Nothing here raises for a
missing piece: an unknown value is reported as such, so the report is always complete.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from accelify import __version__


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


def _torch_info() -> list[tuple[str, str]]:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:  # the report must still come out
        return [("torch", f"not importable ({exc})")]
    cuda = torch.cuda.is_available()
    rows = [("torch", torch.__version__), ("CUDA (torch built with)", str(torch.version.cuda or "none")),
            ("CUDA available", str(cuda))]
    nccl = "not available"
    if cuda and dist.is_available() and dist.is_nccl_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # a broken NCCL install is itself worth reporting
            nccl = "available, version unknown"
    rows.append(("NCCL", nccl))
    gpus = torch.cuda.device_count() if cuda else 0
    rows.append(("GPUs", str(gpus)))
    for index in range(gpus):
        props = torch.cuda.get_device_properties(index)
        rows.append((f"GPU {index}", f"{props.name}, {props.total_memory / 2**30:.1f} GiB"))
    rows.append(("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "not set")))
    rows.append(("Gloo backend", str(dist.is_available() and dist.is_gloo_available())))
    rows.append(("NCCL backend", str(dist.is_available() and dist.is_nccl_available())))
    return rows


def _package_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def collect_env(config_file: str | None = None, environ: Mapping[str, str] | None = None) -> EnvReport:
    """Gather the report; ``config_file`` as for ``accelify launch --config-file``."""
    from accelify.runtime.config import find_config_file, load_config
    from accelify.runtime.errors import ConfigurationError

    info = [("accelify", __version__), ("Python", sys.version.split()[0]),
            ("platform", platform.platform()), ("CPU cores", str(os.cpu_count()))]
    info += _torch_info()
    info.append(("accelerate (Hugging Face)", _package_version("accelerate")))
    env = os.environ if environ is None else environ
    set_vars = sorted(k for k in env if k.startswith(("ACCELIFY_", "ACCELERATE_")))
    info.append(("ACCELIFY_*/ACCELERATE_* variables", ", ".join(f"{k}={env[k]}" for k in set_vars) or "none"))
    try:
        path = find_config_file(config_file, env)
    except ConfigurationError as exc:
        return EnvReport(tuple(info), config_path=config_file, config_problem=str(exc))
    if path is None:
        return EnvReport(tuple(info))
    try:
        loaded = load_config(path)
    except ConfigurationError as exc:
        return EnvReport(tuple(info), config_path=str(path), config_problem=f"invalid: {exc}")
    return EnvReport(tuple(info), config_path=str(path), config=dict(loaded.raw))
