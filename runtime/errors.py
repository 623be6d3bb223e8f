"""Errors the runtime raises on purpose. Each message says what happened and what to do."""

from __future__ import annotations


class AccelifyRuntimeError(RuntimeError):
    """Base class of the runtime's own errors."""


class ConfigurationError(AccelifyRuntimeError, ValueError):
    """A setting (argument, environment variable, config or launch file) has an invalid value."""


class DistributedSetupError(AccelifyRuntimeError):
    """The process group could not be set up as the environment asks; never silently skipped."""


class DistributedOperationException(AccelifyRuntimeError):
    """A collective operation cannot proceed: processes disagree on shapes or on which operation they are in,
    or some never arrived. The message names every process and what it was doing."""


class UnusedParametersError(AccelifyRuntimeError):
    """DDP found parameters that got no gradient; the message names them and the fix."""


class CheckpointError(AccelifyRuntimeError):
    """A checkpoint cannot be written or read as asked; the message names the file and the fix."""
