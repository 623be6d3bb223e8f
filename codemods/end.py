"""EndTraining: ``accelerator.end_training()`` at the end of the builder, after the final saves.

Before::

    def main():
        ...
        torch.save(model.state_dict(), "net.pt")

After::

    def main():
        ...
        accelerator.wait_for_everyone()
        accelerator.save(accelerator.unwrap_model(model).state_dict(), "net.pt")
        accelerator.end_training()

In a trainer class it ends the method that drives training (the one no other method calls).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.context import Context, code_of
from accelify.codemods.facts import Scope
from accelify.codemods.rule import Rule


class EndTraining(Rule):
    name = "end"
    description = "End training (trackers, process group) at the end of the builder."

    def run(self, ctx: Context) -> None:
        builder = ctx.plan.builder
        if builder is None or builder not in ctx.accelerators:
            return
        accelerator = ctx.accelerators[builder]
        scope = self._driver(ctx, builder) if builder.class_scope is not None and accelerator.startswith("self.") else builder
        if scope is None or not scope.body:
            return
        body = scope.body
        last = body[-1]
        code = [f"{accelerator}.end_training()"]
        if scope.kind == "module":
            while len(body) > 1 and _is_main_guard(last):
                body = body[:-1]
                last = body[-1]
        if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], (cst.Return, cst.Raise)):
            ctx.insert_before(last, code)
        else:
            ctx.insert_after(last, code)
        ctx.change("end training with accelerator.end_training()")

    def _driver(self, ctx: Context, builder: Scope) -> Scope | None:
        """The method of the trainer class that runs training and that no other method calls."""
        cls = builder.class_scope
        methods = [s for s in ctx.facts.scopes if s.parent is cls and s.kind == "function"]
        called = {ctx.plan.callee(site) for m in methods for site in m.calls}
        drivers = [
            m for m in methods if m not in called and any(ctx.plan.reaches_backward(site) for site in m.calls)
        ]
        return drivers[0] if len(drivers) == 1 else None


def _is_main_guard(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.If) and "__name__" in code_of(stmt.test)
