"""The launch settings: what ``accelify launch`` hands its training processes, and their environment fallbacks.

This module is the one documented channel from a launcher to the training processes.

* The launcher resolves its command line over the user's config file, writes the result as a
  small YAML file (the launch file), and points ``ACCELIFY_LAUNCH_CONFIG`` at it in the workers'
  environment. The file holds only the keys of :class:`LaunchSettings`, by those names.
* A script run without the launcher (``python train.py``, plain ``torchrun``) may set the same
  values through ``ACCELIFY_<NAME>`` or Hugging Face's ``ACCELERATE_<NAME>`` variables:
  ``MIXED_PRECISION``, ``GRADIENT_ACCUMULATION_STEPS``, ``DEBUG_MODE``, ``USE_CPU``, ``USE_FSDP``
  (the options of :mod:`.launch_options` with an ``env`` name; each value is checked by its option).

Precedence, as tested: an explicit ``Accelerator(...)`` argument > the launch file (which already
holds command line > config file) > ``ACCELIFY_*`` > ``ACCELERATE_*`` > the defaults.
:func:`load_launch_settings` reads a launch file once per process (the first ``Accelerator``,
``PartialState`` and debug check share what it read); the environment variables, cheap to read, are
read at each call, so a test that changes them sees the change. :func:`forget_launch_settings` drops
what was read (for a test that rewrites a launch file in place; :func:`.launch_session.launch_session`
calls it around the file it writes).

Process identity (rank, world size, ...) is not here: ``process_group.ProcessInfo`` reads what
``torch.distributed.run`` sets. Three variables that are not launch settings are read here too, at the
moment their user is created: ``ACCELIFY_LOG_LEVEL`` / ``ACCELERATE_LOG_LEVEL`` (:func:`log_level`,
read by each ``get_logger`` call, as Hugging Face does), ``ACCELIFY_DURABLE_CHECKPOINTS``
(:func:`durable_checkpoints`, read by each ``ProjectConfiguration``) and ``ACCELIFY_SENTINELS``
(:func:`sentinels_enabled`, read by each ``Accelerator`` not given ``sentinels=``).

(The tool has its own, unrelated settings: ``[tool.accelify]`` in ``pyproject.toml``, read by
``accelify/settings.py`` for the conversion.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from .errors import ConfigurationError
from .launch_options import OPTIONS, SETTINGS, parse_bool

LAUNCH_CONFIG_VAR = "ACCELIFY_LAUNCH_CONFIG"
LOG_LEVEL_VARS = ("ACCELIFY_LOG_LEVEL", "ACCELERATE_LOG_LEVEL")
DURABLE_ENV = "ACCELIFY_DURABLE_CHECKPOINTS"
SENTINELS_ENV = "ACCELIFY_SENTINELS"

# Launch files read in this process: path -> the validated values (see load_launch_settings).
_READ: dict[str, dict[str, Any]] = {}


@dataclass(frozen=True)
class LaunchSettings:
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
    known = {f.name for f in fields(LaunchSettings)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigurationError(
            f"{path}: unknown launch setting(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}."
        )
    return {k: OPTIONS[k].validate(v, path, k) for k, v in data.items() if v is not None}


def load_launch_settings(environ: Mapping[str, str] | None = None) -> LaunchSettings:
    """The launch settings of this process: the launch file (read once per process) over the environment.

    See the module docstring for precedence. ``environ`` defaults to ``os.environ``.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for option in SETTINGS:
        for prefix in ("ACCELIFY_", "ACCELERATE_"):
            var = prefix + str(option.env)
            if var in env and env[var] != "":
                values[option.name] = option.validate(env[var], var, option.name)
                break
    path = env.get(LAUNCH_CONFIG_VAR)
    if path:
        if path not in _READ:
            _READ[path] = _from_launch_file(path)
        values.update(_READ[path])
    return LaunchSettings(**values)


def forget_launch_settings() -> None:
    """Forget the launch files read so far: the next :func:`load_launch_settings` reads its file again."""
    _READ.clear()


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


def sentinels_enabled(explicit: bool | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether an ``Accelerator`` runs the sentinels (:mod:`.sentinels`): its ``sentinels=`` argument when given,
    else ``ACCELIFY_SENTINELS`` (default on; only an explicit 0/false/no/off turns them off)."""
    if explicit is not None:
        return bool(explicit)
    env = os.environ if environ is None else environ
    return parse_bool(env.get(SENTINELS_ENV, ""), SENTINELS_ENV, empty=True)
