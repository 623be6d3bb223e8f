"""The ``accelify`` command line: a click group whose commands load lazily.

Each command lives in its own module under ``accelify.cli`` and is imported only when it runs,
so ``accelify launch`` does not pay for libcst and ``accelify convert`` does not pay for torch.
"""

from __future__ import annotations

import importlib

import click

from accelify import __version__

# name -> "module:attribute"; the order is the order of ``accelify --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "convert": ("accelify.cli.convert:convert", "Convert training scripts to distributed-ready ones."),
    "migrate": ("accelify.cli.migrate:migrate", "Convert every training script of a folder, in parallel, with a report."),
    "verify": ("accelify.cli.verify:verify", "Prove a conversion trains like the original, and distributed."),
    "launch": ("accelify.cli.launch:launch", "Run a script on N processes, GPUs or machines."),
    "config": ("accelify.cli.config:config", "Write, show or create the launch configuration."),
    "env": ("accelify.cli.env:env", "Print versions, devices and the config in use (for bug reports)."),
    "test": ("accelify.cli.test:test", "Launch a bundled check script with the configured processes."),
    "rules": ("accelify.cli.rules:rules", "List every conversion rule and warning code."),
    "rule": ("accelify.cli.rules:rule", "Explain one warning code (ACC016) or rule, with its before/after example."),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command is invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, _ = COMMANDS[cmd_name]
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_, help_text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="accelify")
def main() -> None:
    """accelify: migrate PyTorch training scripts to distributed training, and run them."""
