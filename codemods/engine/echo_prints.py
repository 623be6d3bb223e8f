"""The prints of command-line and progress-bar libraries (``click.echo``, ``typer.echo``, ``tqdm.write``), which every
process runs as it runs ``print``: once per machine, as the print rule (``rules/print.py``) makes ``print``. It calls
``echo_statements`` after its own edits."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.handle_uses import alone
from accelify.codemods.analysis.import_time import before_exit
from accelify.codemods.analysis.snippets import expression, on_main_process
from accelify.codemods.engine.context import Context

_ECHOES = ("click.echo", "click.secho", "typer.echo", "typer.secho", "tqdm.tqdm.write", "tqdm.write",
           "tqdm.auto.tqdm.write")


def echo_statements(ctx: Context) -> None:
    """``click.echo(f"epoch {epoch}: loss {loss:.3f}")`` (set W's W8), ``tqdm.write(...)``: a print of a library, as a
    statement of its own where the accelerator exists. Given one message and nothing else it becomes
    ``accelerator.print(message)`` (what it prints is computed on every process still: ``click.echo(summary(model,
    input_size=...))`` runs a forward that makes a lazy layer's weights); else, where its arguments call nothing but
    formatting, it runs on the main process (``if accelerator.is_main_process:``, ``err=True`` kept)."""
    for site in ctx.facts.calls:
        if site.qualname not in _ECHOES or not alone(site) or not ctx.after_accelerator(site.scope, site.stmt):
            continue
        if before_exit(ctx.facts, site.stmt) or ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope):
            continue
        accelerator = ctx.accelerator_in(site.scope)
        args = site.node.args
        if len(args) == 1 and args[0].keyword is None and not args[0].star and site.qualname in _CLI_ECHOES:
            if ctx.replace(site.node.func, site.stmt, lambda _, f=expression(f"{accelerator}.print"): f):  # type: ignore[misc]
                ctx.change("print -> accelerator.print")
        elif all(_formatting(c) for a in args for c in m.findall(a, m.Call())) and ctx.replace(
                site.stmt, site.stmt, lambda s, a=accelerator: on_main_process(s, a)):  # type: ignore[misc]
            ctx.change("print on the main process only")


_CLI_ECHOES = ("click.echo", "typer.echo")
_FORMATTING = ("str", "repr", "round", "len", "int", "float", "format", "item", "tolist")


def _formatting(call: cst.CSTNode) -> bool:
    """``f"{loss.item():.3f}"``'s ``item()``, ``round(x, 3)``, ``"{}".format(x)``: a call that only formats."""
    func = call.func  # type: ignore[attr-defined]
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
    return name in _FORMATTING
