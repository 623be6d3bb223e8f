"""Errors the runtime raises on purpose. Each message says what happened and what to do."""

from __future__ import annotations


class AccelifyRuntimeError(RuntimeError):
    """Base class of the runtime's own errors."""


class ConfigurationError(AccelifyRuntimeError, ValueError):
    """A setting (argument, environment variable, config or launch file) has an invalid value."""


class DistributedSetupError(AccelifyRuntimeError):
    """The process group could not be set up as the environment asks; never silently skipped."""
