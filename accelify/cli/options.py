"""Click options that several commands share, each defined once (launch, config, env, test), and the launch
options made from the runtime's table."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import click

from accelify.runtime.launch_options import COMMAND_LINE, LaunchOption

F = TypeVar("F", bound=Callable[..., Any])


def config_file_option(func: F) -> F:
    """``--config-file/--config_file PATH``, shared by launch, config, env and test."""
    return click.option(
        "--config-file", "--config_file", "config_file", type=click.Path(dir_okay=False), default=None,
        help="Config file to use (default: ACCELIFY_CONFIG_FILE, ACCELERATE_CONFIG_FILE, "
             "then $XDG_CONFIG_HOME/accelify/config.yaml).",
    )(func)


_TYPES: dict[str, Any] = {"int": int, "float": float, "str": None}


def _click_option(option: LaunchOption) -> Callable[[F], F]:
    """One entry of :data:`~accelify.runtime.launch_options.LAUNCH_OPTIONS` as a click option: every spelling
    (accelify's, then Hugging Face's), ``None`` when not given (the plan applies precedence and defaults)."""
    names = (*option.cli_flags, option.name)
    if option.kind == "flag":
        return click.option(*names, is_flag=True, default=None, help=option.help)
    kind = click.Choice(option.choices) if option.kind == "choice" else _TYPES[option.kind]
    return click.option(*names, type=kind, default=None, help=option.help)


def launch_options(func: F) -> F:
    """Every command-line launch option of the runtime's table, in the table's order (``accelify launch``)."""
    for option in reversed(COMMAND_LINE):
        func = _click_option(option)(func)
    return func
