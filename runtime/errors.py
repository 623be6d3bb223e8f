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


class ParametersDifferError(AccelifyRuntimeError):
    """A sentinel found a prepared model's parameters different between processes (see :mod:`.sentinels`);
    the message names the model, the step, the first differing parameter and the likely causes."""


class SentinelWarning(UserWarning):
    """A sentinel saw a likely mistake that does not stop training (see :mod:`.sentinels`): an optimizer stepping
    with no gradients, a prepared scheduler stepped once per epoch. Each is warned once, naming the object."""


class CheckpointError(AccelifyRuntimeError):
    """A checkpoint cannot be written or read as asked; the message names the file and the fix."""


class PeerFailureError(AccelifyRuntimeError):
    """Raised on this process because another process failed, left or never arrived: the cause is elsewhere.

    ``accelify launch`` and ``notebook_launcher`` report a process that failed on its own before
    one that raised this (see :mod:`.failure_report`). Every subclass is defined in this module,
    so the launcher knows them all by importing it.
    """


class ProcessMissingError(PeerFailureError, DistributedOperationException):
    """Debug mode: a process exited or never arrived while the others waited for it in a collective."""


class CheckpointPeerError(PeerFailureError, CheckpointError):
    """Another process failed to write or read its part of a checkpoint; nothing was changed here."""


class FolderError(PeerFailureError, OSError):
    """Process 0 could not prepare a checkpoint's temporary folder; the others learn it instead of waiting."""


def peer_failure_names() -> frozenset[str]:
    """The class names of :class:`PeerFailureError` and its subclasses (as an error file records them)."""
    names, todo = set(), [PeerFailureError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)
