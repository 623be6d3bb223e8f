"""Run settings the launcher hands to its workers, and their environment-variable fallbacks.

This module is the one documented channel from ``accelify launch`` to the training processes.

* The launcher resolves its command line over the user's config file, writes the result as a
  small YAML file, and points ``ACCELIFY_LAUNCH_CONFIG`` at it in the workers' environment.
  The file holds only the keys of :class:`Settings`, by those names.
* A script run without the launcher (``python train.py``, plain ``torchrun``) may set the same
  values through ``ACCELIFY_<NAME>`` or Hugging Face's ``ACCELERATE_<NAME>`` variables:
  ``MIXED_PRECISION``, ``GRADIENT_ACCUMULATION_STEPS``, ``DEBUG_MODE``, ``USE_CPU``, ``USE_FSDP``.

Precedence, as tested: an explicit ``Accelerator(...)`` argument > the launch file (which already
holds command line > config file) > ``ACCELIFY_*`` > ``ACCELERATE_*`` > the defaults.
Process identity (rank, world size, ...) is not here: ``process_group.ProcessInfo`` reads what
``torch.distributed.run`` sets. Two variables that are not launch settings are read here too, at the
moment their user is created: ``ACCELIFY_LOG_LEVEL`` / ``ACCELERATE_LOG_LEVEL`` (:func:`log_level`,
read by each ``get_logger`` call, as Hugging Face does) and ``ACCELIFY_DURABLE_CHECKPOINTS``
(:func:`durable_checkpoints`, read by each ``ProjectConfiguration``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .errors import ConfigurationError

LAUNCH_CONFIG_VAR = "ACCELIFY_LAUNCH_CONFIG"
LOG_LEVEL_VARS = ("ACCELIFY_LOG_LEVEL", "ACCELERATE_LOG_LEVEL")
DURABLE_ENV = "ACCELIFY_DURABLE_CHECKPOINTS"
MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16")

# Settings field -> suffix of the environment variables that may set it.
_ENV_NAMES = {
    "mixed_precision": "MIXED_PRECISION",
    "gradient_accumulation_steps": "GRADIENT_ACCUMULATION_STEPS",
    "debug": "DEBUG_MODE",
    "cpu": "USE_CPU",
    "use_fsdp": "USE_FSDP",
}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(raw: Any, where: str, *, empty: bool | None = None) -> bool:
    """``raw`` (a bool, or 1/0, true/false, yes/no, on/off in any case) as a bool.

    ``empty`` is what an empty string means (environment variables set to ""); None makes it an
    error, as in config files. ``where`` names the value in the error, e.g. ``"cfg.yaml: use_cpu"``.
    """
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text == "" and empty is not None:
        return empty
    raise ConfigurationError(f"{where}={raw!r} is not valid; allowed: true or false (1/0, yes/no, on/off).")


@dataclass(frozen=True)
class Settings:
    """Values an ``Accelerator`` uses for arguments its caller left unset (``None`` = not given)."""

    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    debug: bool | None = None
    cpu: bool | None = None
    use_fsdp: bool | None = None
    fsdp_config: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The keys and values the launcher writes to the launch file (``None`` values omitted)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name == "fsdp_config" and not value):
                continue
            out[f.name] = dict(value) if f.name == "fsdp_config" else value
        return out


def _parse(name: str, raw: Any, source: str) -> Any:
    """Validate one value; ``source`` names where it came from for the error message."""
    if name == "mixed_precision":
        value = str(raw).lower()
        if value not in MIXED_PRECISION_CHOICES:
            raise ConfigurationError(
                f"{source}: mixed_precision={raw!r} is not valid; use one of {', '.join(MIXED_PRECISION_CHOICES)}."
            )
        return value
    if name == "gradient_accumulation_steps":
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            raise ConfigurationError(f"{source}: gradient_accumulation_steps={raw!r} must be a whole number >= 1.")
        return value
    if name == "fsdp_config":
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"{source}: fsdp_config must be a mapping, got {type(raw).__name__}.")
        return dict(raw)
    return parse_bool(raw, f"{source}: {name}", empty=False)


def _from_launch_file(path: str) -> dict[str, Any]:
    import yaml  # only when launched: plain runs never pay for it

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigurationError(
            f"{LAUNCH_CONFIG_VAR}={path} cannot be read ({exc.strerror}); unset it or relaunch with `accelify launch`."
        ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path}: the launch file must be a YAML mapping.")
    known = {f.name for f in fields(Settings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigurationError(
            f"{path}: unknown launch setting(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}."
        )
    return {k: _parse(k, v, path) for k, v in data.items() if v is not None}


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read the launch file and the environment once; see the module docstring for precedence."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, suffix in _ENV_NAMES.items():
        for prefix in ("ACCELIFY_", "ACCELERATE_"):
            var = prefix + suffix
            if var in env and env[var] != "":
                values[name] = _parse(name, env[var], var)
                break
    path = env.get(LAUNCH_CONFIG_VAR)
    if path:
        values.update(_from_launch_file(path))
    return Settings(**values)


def log_level(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(level, variable)`` from ``ACCELIFY_LOG_LEVEL``, else ``ACCELERATE_LOG_LEVEL``; None when neither is set."""
    env = os.environ if environ is None else environ
    for variable in LOG_LEVEL_VARS:
        if env.get(variable):
            return env[variable], variable
    return None


def durable_checkpoints(environ: Mapping[str, str] | None = None) -> bool:
    """``ACCELIFY_DURABLE_CHECKPOINTS`` (default on); only an explicit 0/false/no/off turns fsyncs off."""
    env = os.environ if environ is None else environ
    return parse_bool(env.get(DURABLE_ENV, ""), DURABLE_ENV, empty=True)
