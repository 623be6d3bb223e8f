"""Click options that several commands share, each defined once (launch, config, env, test)."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def config_file_option(func: F) -> F:
    """``--config-file/--config_file PATH``, shared by launch, config, env and test."""
    return click.option(
        "--config-file", "--config_file", "config_file", type=click.Path(dir_okay=False), default=None,
        help="Config file to use (default: ACCELIFY_CONFIG_FILE, ACCELERATE_CONFIG_FILE, "
             "then $XDG_CONFIG_HOME/accelify/config.yaml).",
    )(func)
