"""Checking and resolving the Accelerator's constructor arguments (before any process state exists).

Hugging Face Accelerate options accelify does not implement are refused, never ignored; a setting
left as ``None`` is resolved by :func:`pick` (explicit argument > launcher/environment > default).
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigurationError
from .launch_options import check_accumulation_steps

# Hugging Face Accelerate constructor arguments accelify does not implement: an error, never ignored.
_UNSUPPORTED = {
    "deepspeed_plugin", "deepspeed_plugins", "megatron_lm_plugin", "torch_tp_plugin", "parallelism_config",
    "dynamo_plugin", "dispatch_batches", "use_seedable_sampler", "fp8_recipe_handler",
}


def refuse_unsupported(unsupported: dict[str, Any], dynamo_backend: str | None) -> None:
    """Raise ``TypeError`` for unknown keyword arguments, ``ConfigurationError`` for known unsupported ones."""
    if unsupported:
        known = sorted(set(unsupported) & _UNSUPPORTED)
        unknown = sorted(set(unsupported) - _UNSUPPORTED)
        if unknown:
            raise TypeError(f"Accelerator() got unexpected keyword argument(s) {', '.join(unknown)}.")
        raise ConfigurationError(
            f"Accelerator({', '.join(k + '=...' for k in known)}): Hugging Face Accelerate option(s) that accelify "
            "does not support; remove them (use fsdp_plugin= for sharded training)."
        )
    if dynamo_backend not in (None, "no", "NO"):
        raise ConfigurationError(f"dynamo_backend={dynamo_backend!r} is not supported; call torch.compile yourself.")


def accumulation_steps(steps: int | None, plugin: Any, configured: int | None) -> int:
    """The gradient accumulation steps from the argument or the plugin (not both), else the launch setting, else 1."""
    if plugin is not None:
        if steps not in (None, 1):
            raise ConfigurationError("Pass gradient_accumulation_steps or gradient_accumulation_plugin, not both.")
        steps = plugin.num_steps
    return check_accumulation_steps(pick(steps, configured, 1), "Accelerator")


def pick(explicit: Any, configured: Any, default: Any) -> Any:
    """Precedence: explicit argument > launcher/environment setting > default."""
    if explicit is not None:
        return explicit
    return configured if configured is not None else default
