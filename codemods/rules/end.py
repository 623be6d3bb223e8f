"""EndTraining: ``accelerator.end_training()`` at the end of the builder, after the final saves.

In a trainer class it ends the method that drives training (the one no other method calls).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.blocks import block_of
from accelify.codemods.engine.rule import Example, Rule


class EndTraining(Rule):
    name = "end"
    description = "End training (trackers, process group) at the end of the builder."
    examples = (
        Example(
            before='''\
import torch

def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
    torch.save(model.state_dict(), "net.pt")

if __name__ == "__main__":
    main()
''',
            after='''\
import torch
from accelify.runtime import Accelerator

def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.wait_for_everyone()
    accelerator.save(accelerator.unwrap_model(model).state_dict(), "net.pt")
    accelerator.end_training()

if __name__ == "__main__":
    main()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
model.load_state_dict(torch.load("net.pt"))
print(model(torch.ones(2)))
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        home = ctx.plan.home
        accelerator = ctx.accelerator_in(home) if home is not None else None
        if home is None or accelerator is None:
            return
        scope = self._driver(ctx, home) if home.class_scope is not None and accelerator.startswith("self.") else home
        if scope is None or not scope.body:
            return
        if scope is not home and accelerator.startswith("self."):
            later = _used_after(ctx, scope)
            if later is not None:  # (set U's U11: ``model.train()`` then ``model.compute_roc()``, which gathers)
                stmt, receiver = later
                ctx.insert_after(stmt, [f"{receiver}.{accelerator[len('self.'):]}.end_training()"], ungrouped=True)
                ctx.change("end training with accelerator.end_training()")
                return
        body = ctx.plan.home_block if scope is home and home.kind == "module" else scope.body
        last = body[-1]
        code = [f"{accelerator}.end_training()"]
        if scope.kind == "module":
            while len(body) > 1 and _is_main_guard(last):
                inner = block_of(last)
                if inner and any(ctx.plan.drives_training(scope, stmt) for stmt in inner):
                    body, last = inner, inner[-1]  # training runs in the guard: end it there
                    break
                body = body[:-1]
                last = body[-1]
        if isinstance(last, cst.SimpleStatementLine) and (isinstance(last.body[-1], (cst.Return, cst.Raise)) or (
                ctx.notebook and scope.kind == "module" and _shown_value(last))):
            # (a notebook cell that ends with an expression shows its value: set U's U7, ``min(losses)``; after it,
            # ``end_training()`` would be the cell's last statement, and the value shown no more)
            ctx.insert_before(last, code)
        else:
            # (never inside a guard another rule put around the last statement: ``if accelerator.is_main_process:
            # log.to_csv(p)`` would end the training on the main process alone, which then waits for the others
            # forever: set W's W8)
            ctx.insert_after(last, code, ungrouped=True)
        ctx.change("end training with accelerator.end_training()")

    def _driver(self, ctx: Context, builder: Scope) -> Scope | None:
        """The method of the trainer class that runs training and that no other method calls."""
        cls = builder.class_scope
        methods = [s for s in ctx.facts.scopes if s.parent is cls and s.kind == "function"]
        called = {ctx.plan.callee(site) for m in methods for site in m.calls}
        drivers = [m for m in methods if m not in called and _loops_over_training(ctx, m, set())
                   and not any(site.loop is not None for site in ctx.plan.call_sites(m))]  # PPO's update per episode
        return drivers[0] if len(drivers) == 1 else None


def _used_after(ctx: Context, driver: Scope) -> tuple[cst.BaseStatement, str] | None:
    """Where the trainer whose ``driver`` method runs the training is used after that call (``model.train()`` then
    ``model.compute_roc()``, which gathers through the accelerator): the last statement of the caller that calls a
    method of the same instance, and the instance as code. Ended in the driver, the accelerator would be used after
    ``end_training()`` (Hugging Face Accelerate's destroys the process group). None where nothing uses it after."""
    last: tuple[cst.BaseStatement, str] | None = None
    for site in ctx.plan.call_sites(driver):
        func = site.node.func
        if not isinstance(func, cst.Attribute):
            continue
        receiver = code_of(func.value)
        for other in site.scope.calls:
            if other is site or not isinstance(other.node.func, cst.Attribute) \
                    or code_of(other.node.func.value) != receiver or not ctx.facts.after(other.stmt, site.stmt) \
                    or ctx.other_branch(other.stmt, site.stmt):
                continue
            if last is None or ctx.facts.after(other.stmt, last[0]):
                last = (other.stmt, receiver)
    return last


_SHOWN_CALLS = ("min", "max", "len", "sum", "round", "abs", "sorted", "list", "tuple", "str", "repr", "float", "int")


def _shown_value(stmt: cst.SimpleStatementLine) -> bool:
    """Whether ``stmt`` is an expression a notebook cell ends with to show its value (``min(losses)``,
    ``elapsed.total_seconds() / 60``): a value read, not a call made for what it does (``accelerator.save(...)``)."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Expr):
        return False
    value = stmt.body[0].value
    if isinstance(value, cst.Call):
        return isinstance(value.func, cst.Name) and value.func.value in _SHOWN_CALLS
    return not isinstance(value, (cst.Await, cst.Yield))


def _loops_over_training(ctx: Context, scope: Scope, seen: set[int]) -> bool:
    """Whether ``scope`` runs the training loop: a call reaching ``backward`` inside one of its loops, or in a method it
    calls that does. A method that takes one step per call (an RL agent's ``learn(batch)``, called by the script's own
    loop) is no driver: ending the training there would end it after the first step (Hugging Face Accelerate's
    ``end_training`` destroys the process group)."""
    if id(scope) in seen:
        return False
    seen.add(id(scope))
    for site in scope.calls:
        if not ctx.plan.reaches_backward(site):
            continue
        if site.loop is not None:
            return True
        callee = ctx.plan.callee(site)
        if callee is not None and _loops_over_training(ctx, callee, seen):
            return True
    return False


def _is_main_guard(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.If) and "__name__" in code_of(stmt.test)
