"""SwapPrint: ``print(...)`` once the accelerator exists -> ``accelerator.print(...)`` (once per machine).

Before::

    print(f"epoch {epoch} loss {loss.item():.4f}")

After::

    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")

Prints before the accelerator is created, and in functions that do not have it, stay as they are.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.context import Context, expression
from accelify.codemods.rule import Rule


class SwapPrint(Rule):
    name = "print"
    description = "Print once per machine with accelerator.print."

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if site.qualname != "print" or not isinstance(site.node.func, cst.Name):
                continue
            if site.scope.resolve("print") is not None or not ctx.after_accelerator(site.scope, site.stmt):
                continue
            accelerator = ctx.accelerator_in(site.scope)
            func = expression(f"{accelerator}.print")
            if ctx.replace(site.node.func, site.stmt, lambda _, f=func: f):  # type: ignore[misc]
                ctx.change("print -> accelerator.print")
