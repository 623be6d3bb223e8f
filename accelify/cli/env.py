"""``accelify env``: versions, devices and the config in use, as a list to paste into a bug report."""

from __future__ import annotations

import click

from accelify.cli.options import config_file_option


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_file_option
def env(config_file: str | None) -> None:
    """Print versions (accelify, Python, torch, CUDA, NCCL), platform, GPUs, backends and the config file."""
    from accelify.envinfo import collect_env

    report = collect_env(config_file)
    click.echo("Copy and paste this into your bug report:\n")
    click.echo(report.as_text())
