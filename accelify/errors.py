"""Errors raised by the accelify tool (CLI, conversion pipeline, launcher).

Every error says what went wrong, where, and what to do. The CLI maps them to exit code 2 and
prints the message without a traceback (unless ``--verbose``). The runtime has its own base,
``accelify.runtime.errors.AccelifyRuntimeError``, because the runtime never imports the tool.
"""

from __future__ import annotations


class AccelifyError(Exception):
    """Base class of every error the tool raises on purpose."""

    exit_code: int = 2
