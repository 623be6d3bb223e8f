"""The command line's one mapping from errors to exit codes, used by every command.

0 success, 1 "something would change" or a check failed (each command decides), 2 an error the tool
or the runtime raised on purpose (:class:`~accelify.errors.AccelifyError`, the runtime's
:class:`~accelify.runtime.errors.ConfigurationError`): its message on stderr as ``error: ...``, no
traceback unless ``--verbose``. 130 after Ctrl-C. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, NoReturn

import click

from accelify.errors import AccelifyError

ERROR = 2
INTERRUPTED = 130


def exit_code(error: BaseException) -> int | None:
    """The exit code for an error raised on purpose, or None for anything else (a bug: let it raise)."""
    if isinstance(error, AccelifyError):
        return error.exit_code
    from accelify.runtime.errors import ConfigurationError  # cheap: no torch

    if isinstance(error, ConfigurationError):
        return ERROR
    return None


def fail(error: BaseException, *, verbose: bool = False) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with its code; with ``verbose``, raise it too (traceback)."""
    code = exit_code(error)
    if code is None:
        raise error
    click.echo(f"error: {error}", err=True)
    if verbose:
        raise error
    sys.exit(code)


@contextmanager
def exit_on_error(*, verbose: bool = False) -> Iterator[None]:
    """Within the block, an error raised on purpose ends the command through :func:`fail`."""
    try:
        yield
    except Exception as error:
        if exit_code(error) is None:
            raise
        fail(error, verbose=verbose)
