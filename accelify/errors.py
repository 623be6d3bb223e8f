"""Errors raised by the accelify tool (CLI, conversion pipeline, launcher).

Every error says what went wrong, where, and what to do. The CLI maps them to exit code 2 and
prints the message without a traceback (unless ``--verbose``). The runtime has its own base,
``accelify.runtime.errors.AccelifyRuntimeError``, because the runtime never imports the tool.
"""

from __future__ import annotations


class AccelifyError(Exception):
    """Base class of every error the tool raises on purpose."""

    exit_code: int = 2


class SourceError(AccelifyError):
    """A file that cannot be read as Python source (binary, undecodable, missing)."""

    def __init__(self, path: str, reason: str, hint: str) -> None:
        self.path = path
        self.reason = reason
        self.hint = hint
        super().__init__(f"{path}: {reason} ({hint})")


class TooLargeError(SourceError):
    """A file over the size limit: not read, reported as skipped (it is not a training script)."""


class ConfigError(AccelifyError):
    """A ``[tool.accelify]`` table that cannot be used."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: [tool.accelify] {reason}")


class OutputError(AccelifyError):
    """A destination that cannot be written."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: cannot write: {reason}")


class OutputCheckError(AccelifyError):
    """The converted code does not parse, or would be converted again: a bug in a rule. The pipeline reports the
    file as failed (``internal error while converting``) and writes nothing."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class UnknownTargetError(AccelifyError):
    """A ``--target`` (or ``[tool.accelify] target``) that is neither ``accelify`` nor ``accelerate``."""

    def __init__(self, target: str) -> None:
        self.target = target
        from accelify.codemods.engine.targets import TARGET_NAMES

        super().__init__(f"unknown target {target!r} (use one of {', '.join(map(repr, TARGET_NAMES))})")


class LaunchError(AccelifyError):
    """A launch request that cannot run as asked (``accelify launch``/``test``); the message says why and what to do."""
