"""Plumbing shared by the launch-side commands (launch, config, env, test); no rich here."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import click

from accelify.errors import AccelifyError
from accelify.runtime.errors import ConfigurationError


@contextmanager
def exit_on_error() -> Iterator[None]:
    """Turn the tool's and the config file's errors into ``error: ...`` on stderr and exit code 2."""
    try:
        yield
    except AccelifyError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def config_file_option(func):  # type: ignore[no-untyped-def]
    """``--config-file/--config_file PATH``, shared by launch, config, env and test."""
    return click.option(
        "--config-file", "--config_file", "config_file", type=click.Path(dir_okay=False), default=None,
        help="Config file to use (default: ACCELIFY_CONFIG_FILE, ACCELERATE_CONFIG_FILE, "
             "then $XDG_CONFIG_HOME/accelify/config.yaml).",
    )(func)
