"""``accelify rules`` and ``accelify rule KEY``: the converter's rules and warning codes, explained."""

from __future__ import annotations

import sys

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--markdown", is_flag=True, help="Print the whole catalogue as Markdown (what docs/RULES.md holds).")
def rules(markdown: bool) -> None:
    """List every rule and warning code with a one-line summary."""
    from accelify import catalogue

    if markdown:
        sys.stdout.write(catalogue.markdown())
        return
    from accelify.console import make_console
    from accelify.console.catalogue import print_catalogue

    print_catalogue(make_console(), catalogue.codes(), catalogue.rules())


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("key")
def rule(key: str) -> None:
    """Explain a warning code (ACC016) or a rule (prepare), with its before/after example."""
    from accelify import catalogue
    from accelify.console import make_console
    from accelify.console.catalogue import print_entry

    try:
        entry = catalogue.find(key)
    except catalogue.UnknownRuleError as error:
        make_console(stderr=True).print(f"error: {error}", markup=False)
        sys.exit(error.exit_code)
    print_entry(make_console(), entry)
