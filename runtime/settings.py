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

This module is also the one owner of the launch rules every entry point applies (``accelify launch``,
``accelify config``/``test``, ``notebook_launcher``, ``write_basic_config`` and ``Accelerator``):
:data:`MIXED_PRECISION_CHOICES`, :func:`check_mixed_precision` (which precision a device can run) and
the device rules :func:`default_device`, :func:`default_process_count` and :func:`processes_fit`.
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
AUTOCAST_DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16"}  # torch dtype names, looked up when torch is loaded

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
        return parse_mixed_precision(raw, source)
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


# ------------------------------------------------------------------------------------------------
# The launch rules. Stated once here; every entry point calls these functions, none restates them.


def parse_mixed_precision(raw: Any, where: str = "") -> str:
    """``raw`` (any case; ``None`` or an enum member accepted) as one of :data:`MIXED_PRECISION_CHOICES`.

    ``where`` prefixes the error, e.g. ``"ACCELIFY_MIXED_PRECISION"``: ``parse_mixed_precision("FP16")``
    is ``"fp16"``; ``parse_mixed_precision("fp8")`` raises ``ConfigurationError`` listing the choices.
    """
    text = "no" if raw is None else str(getattr(raw, "value", raw)).strip().lower()
    if text not in MIXED_PRECISION_CHOICES:
        prefix = f"{where}: " if where else ""
        raise ConfigurationError(
            f"{prefix}mixed_precision={raw!r} is not valid; use one of {', '.join(MIXED_PRECISION_CHOICES)}."
        )
    return text


def check_mixed_precision(value: Any, device: Any, where: str = "") -> str:
    """The mixed-precision rule: which precision ``device`` can run; returns ``"no"``, ``"fp16"`` or ``"bf16"``.

    The rule: ``fp16`` and ``bf16`` are allowed on every device whose ``torch.autocast`` runs that
    dtype, the CPU included (torch >= 2.4 autocasts both on the CPU, and the fp16 ``GradScaler``
    works there); a GPU without bfloat16 support refuses ``bf16``. Anything else is a
    ``ConfigurationError`` that says what to use instead: a run is never silently fp32 under an fp16
    or bf16 label (Hugging Face Accelerate 1.15 with ``cpu=True`` is).

    ``device`` is a ``torch.device`` in a training process (its GPU's own bfloat16 support is
    checked too), or ``"cpu"``/``"cuda"`` in a launcher, which never initialises CUDA: each
    process then checks its GPU when its ``Accelerator`` is created. ``where`` names the value's
    source in the error (``"command line"``, a config file, an environment variable).
    """
    text = parse_mixed_precision(value, where)
    if text == "no" or (isinstance(device, str) and device != "cpu"):
        return text  # a launcher does not touch the GPUs: each process checks its own when it starts
    import torch  # only when a precision is asked for: this module stays torch-free otherwise

    prefix = f"{where}: " if where else ""
    device_type = device if isinstance(device, str) else device.type
    if device_type == "cuda" and text == "bf16":
        if not torch.cuda.is_bf16_supported():
            raise ConfigurationError(
                f"{prefix}mixed_precision='bf16' needs a GPU with bfloat16 support; "
                f"{torch.cuda.get_device_name(device)} has none. Use mixed_precision='fp16'."
            )
    if not autocast_supports(device_type, text):
        advice = ("Use mixed_precision='bf16' or 'no' on the CPU, or run on a GPU." if device_type == "cpu"
                  else "Use mixed_precision='no' or a device that supports it.")
        raise ConfigurationError(
            f"{prefix}mixed_precision={text!r} is not supported on the {device_type} device by torch "
            f"{torch.__version__} (autocast would silently run in fp32). {advice}"
        )
    return text


def autocast_supports(device_type: str, precision: str) -> bool:
    """Whether ``torch.autocast(device_type, dtype)`` really runs ``precision`` (torch warns and disables
    itself for a dtype the device does not support). Does not initialise CUDA for fp16."""
    import warnings

    import torch

    dtype = getattr(torch, AUTOCAST_DTYPE_NAMES[precision])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = torch.autocast(device_type, dtype=dtype)
    return bool(getattr(ctx, "_enabled", True)) and not any("not supported" in str(w.message) for w in caught)


def mixed_precision_choices(device_type: str) -> tuple[str, ...]:
    """The choices :func:`check_mixed_precision` accepts on ``"cpu"`` or ``"cuda"`` (what to offer a person)."""
    offered = []
    for choice in MIXED_PRECISION_CHOICES:
        try:
            offered.append(check_mixed_precision(choice, device_type))
        except ConfigurationError:
            continue
    return tuple(offered)


def default_device(gpu_count: int) -> str:
    """The device a launch uses when nobody chose one: ``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    return "cuda" if gpu_count > 0 else "cpu"


def default_process_count(device: str, gpu_count: int) -> int:
    """Processes per machine when nobody chose: one per (selected) GPU on ``"cuda"``, one on ``"cpu"``."""
    return max(gpu_count, 1) if device == "cuda" else 1


def processes_fit(per_machine: int, device: str, gpu_count: int) -> bool:
    """Whether ``per_machine`` processes can run: on ``"cuda"`` each needs its own GPU; on ``"cpu"`` any number."""
    return device != "cuda" or per_machine <= gpu_count
