"""Gradient accumulation written by hand, found once (``plan.analysis(find_accumulation)``) for the rules
that read it: the accelerator's ``gradient_accumulation_steps=`` (``creation.py``), ``accumulation`` and
``micro_steps`` (the rewrites).

The shape recognised (the one every tutorial and the 2019-2022 example scripts use)::

    for step, batch in enumerate(loader):
        ...
        loss = loss / k                      # (possibly under `if k > 1:`)
        loss.backward()
        ...
        if (step + 1) % k == 0:              # (possibly `... or step == last`)
            clip_grad_norm_(...)
            optimizer.step(); scheduler.step(); optimizer.zero_grad()
            global_step += 1 ...             # bookkeeping

``k`` must be something the accelerator can read where it is created (a literal, or a name of that
scope such as ``args.gradient_accumulation_steps``). Only this exact shape: one optimizer, a backward on every
batch and none under the condition, ``step()`` and ``zero_grad()`` together under it (``_one_optimizer_under``).
A schedule that trains another model every k batches (a WGAN's ``if i % n_critic == 0:``) is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import Facts, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan

_MODULO = m.BinaryOperation(operator=m.Modulo())


@dataclass
class Accumulation:
    """One training loop that accumulates gradients over ``steps`` batches by hand."""

    loop: Loop
    step_if: cst.If  # the `if (step + 1) % k == 0:` statement, directly in the loop's body
    steps: cst.BaseExpression  # k
    divisions: list[cst.BaseStatement] = field(default_factory=list)  # `loss = loss / k` (or its `if k > 1:`)
    loss: str | None = None  # the name the division divides
    models: list[str] = field(default_factory=list)  # what `accelerator.accumulate(...)` receives


@dataclass
class Accumulations:
    """Every hand-written accumulation of the program, and the one step count the accelerator takes (None
    when there is none, or when loops accumulate over different counts: one accelerator cannot do both, and
    then none is converted)."""

    loops: list[Accumulation] = field(default_factory=list)
    micro_steps: list["MicroSteps"] = field(default_factory=list)
    unconverted: list[cst.If] = field(default_factory=list)  # steps of loops accumulating in a shape left alone
    steps: cst.BaseExpression | None = None


def find_accumulation(plan: Plan) -> Accumulations:
    """The program's accumulation by hand, where the accelerator is made (nothing when it has no home)."""
    found = Accumulations()
    home = plan.home
    if home is None:
        return found
    found.loops = _loops(plan.facts, plan, home, found.unconverted)
    found.micro_steps = _micro_steps(plan.facts, plan, home, plan.distributed.sync_toggles)
    counts = [a.steps for a in [*found.loops, *found.micro_steps]]
    if len({code_of(k) for k in counts}) == 1:
        found.steps = counts[0]
    elif counts:
        found.loops, found.micro_steps = [], []
    return found


def _loops(
    facts: Facts, plan: Plan, home: Scope | None, unconverted: list[cst.If]
) -> list[Accumulation]:
    """Every loop of the program that accumulates by hand in the recognised shape; ``unconverted`` receives
    the steps of loops that accumulate in a shape this cannot convert (an ``else``, an unreadable ``k``)."""
    found = []
    for loop in facts.loops:
        body = loop.node.body
        if not isinstance(body, cst.IndentedBlock) or not any(plan.reaches_backward(s) for s in loop.calls):
            continue
        for stmt in body.body:
            if not isinstance(stmt, cst.If):
                continue
            if stmt.orelse is not None:
                if _modulo_divisor(stmt.test) is not None and _steps_optimizer(plan, loop, stmt) and _backward_outside(plan, loop, stmt):
                    unconverted.append(stmt)
                continue
            steps = _modulo_divisor(stmt.test)
            if steps is None or not _steps_optimizer(plan, loop, stmt) or not _backward_outside(plan, loop, stmt):
                continue  # (an n_critic schedule runs its generator's backward inside the `if`: no accumulation)
            if not _one_optimizer_under(plan, loop, stmt):
                continue  # a WGAN's critic schedule: another optimizer steps every batch; left as it is
            if home is not None and not _readable(home, steps):
                unconverted.append(stmt)
                continue
            accumulation = Accumulation(loop, stmt, steps)
            _divisions(facts, loop, body.body[: body.body.index(stmt)], accumulation)
            accumulation.models = _models(plan, loop)
            if accumulation.models:
                found.append(accumulation)
            break
    return found


def _modulo_divisor(test: cst.BaseExpression) -> cst.BaseExpression | None:
    """``k`` of ``(i + 1) % k == 0`` anywhere in the test."""
    for node in m.findall(test, m.Comparison()):
        assert isinstance(node, cst.Comparison)
        if len(node.comparisons) == 1 and isinstance(node.comparisons[0].operator, cst.Equal):
            left, right = node.left, node.comparisons[0].comparator
            modulo = left if isinstance(left, cst.BinaryOperation) else right
            zero = right if modulo is left else left
            if (
                isinstance(modulo, cst.BinaryOperation) and isinstance(modulo.operator, cst.Modulo)
                and isinstance(zero, cst.Integer) and zero.value == "0"
            ):
                return modulo.right.with_changes(lpar=[], rpar=[])
    return None


def _steps_optimizer(plan: Plan, loop: Loop, stmt: cst.If) -> bool:
    """Whether ``stmt`` steps a prepared optimizer."""
    for site in loop.calls:
        if site.method == "step" and isinstance(site.node.func, cst.Attribute) and site.stmt in _inside(plan.facts, stmt):
            found = plan.origin(site.scope, site.node.func.value)
            if found is not None and found.role == "optimizer":
                return True
    return False


def _one_optimizer_under(plan: Plan, loop: Loop, stmt: cst.If) -> bool:
    """The exact shape accumulation is: one optimizer in the loop, its ``step()`` under the condition and its
    ``zero_grad()`` (or the model's), if the loop has one, there too, neither anywhere else in the loop, and no
    backward under it (the gradients of
    every batch pile up). Anything else (a WGAN's ``if i % n_critic == 0:`` training the generator while the
    critic steps every batch, a backward inside the condition) is not accumulation."""
    inside = _inside(plan.facts, stmt)
    optimizers: set[int] = set()
    step_in = False
    for site in loop.calls:
        if site.method not in ("step", "zero_grad") or not isinstance(site.node.func, cst.Attribute):
            continue
        receivers = [site.node.func.value, *(a.value for a in site.node.args if site.method == "step" and not a.star)]
        roles = [(found, found.role) for r in receivers if (found := plan.origin(site.scope, r)) is not None]
        owner = next((f for f, role in roles if role == "optimizer"), None)
        if owner is None and not (site.method == "zero_grad" and any(role == "model" for _, role in roles)):
            continue  # ``scheduler.step()``, ``scaler.step(...)`` without an optimizer
        if site.stmt not in inside:
            return False  # stepped or zeroed every batch: not accumulated
        if owner is not None:
            optimizers.add(id(owner))
        step_in = step_in or (site.method == "step" and owner is not None)
    backward_in = any(plan.reaches_backward(site) and site.stmt in inside for site in loop.calls)
    return len(optimizers) == 1 and step_in and not backward_in


def _backward_outside(plan: Plan, loop: Loop, stmt: cst.If) -> bool:
    """Whether the loop runs a backward on every batch, outside ``stmt`` (gradients pile up between steps)."""
    inside = _inside(plan.facts, stmt)
    return any(plan.reaches_backward(site) and site.stmt not in inside for site in loop.calls)


def _inside(facts: Facts, stmt: cst.BaseStatement) -> set[cst.BaseStatement]:
    first, last = facts.order[stmt]
    return {s for s, (a, _) in facts.order.items() if first <= a <= last}


def _readable(home: Scope, steps: cst.BaseExpression) -> bool:
    """``4``, ``args.accum``, ``grad_accum``: a literal, or rooted at a name the home scope has."""
    if isinstance(steps, cst.Integer):
        return True
    key = dotted(steps)
    if key is None:
        return False
    head = key.split(".")[0]
    return home.binds(head) or (home.parent is not None and home.parent.kind == "module" and home.parent.binds(head))


def _divisions(facts: Facts, loop: Loop, before: list[cst.BaseStatement], accumulation: Accumulation) -> None:
    """``loss = loss / k`` before the step (alone, or as the only statement of an ``if``)."""
    steps = code_of(accumulation.steps)
    for stmt in before:
        target = stmt
        if isinstance(stmt, cst.If) and stmt.orelse is None and isinstance(stmt.body, cst.IndentedBlock) and len(stmt.body.body) == 1:
            target = stmt.body.body[0]
        if not (isinstance(target, cst.SimpleStatementLine) and len(target.body) == 1):
            continue
        small = target.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            name = small.targets[0].target.value
            value = small.value
            if (
                isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)
                and isinstance(value.left, cst.Name) and value.left.value == name
                and code_of(value.right.with_changes(lpar=[], rpar=[])) == steps
            ):
                accumulation.divisions.append(stmt)
                accumulation.loss = name
        elif isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.DivideAssign) and isinstance(small.target, cst.Name):
            if code_of(small.value.with_changes(lpar=[], rpar=[])) == steps:
                accumulation.divisions.append(stmt)
                accumulation.loss = small.target.value


def _models(plan: Plan, loop: Loop) -> list[str]:
    """The prepared models the loop runs (``accelerator.accumulate(model)``), by the names the loop uses."""
    names: list[str] = []
    for site in loop.calls:
        key = dotted(site.node.func)
        if plan.prepared_model(site.scope, site.node.func, site.stmt) is not None and key is not None and key not in names:
            names.append(key)
    return names



@dataclass
class MicroSteps:
    """nanoGPT's accumulation: ``for micro_step in range(k):`` runs forward and backward ``k`` times, with
    ``model.require_backward_grad_sync`` on the last only; the optimizer steps after the loop."""

    loop: Loop
    steps: cst.BaseExpression  # k
    toggles: list[cst.BaseStatement] = field(default_factory=list)  # the toggle, or the ``if ddp:`` that holds only it
    divisions: list[cst.BaseStatement] = field(default_factory=list)  # ``loss = loss / k``
    loss: str | None = None
    models: list[str] = field(default_factory=list)


def _micro_steps(facts: Facts, plan: Plan, home: Scope | None, toggles: list[cst.BaseStatement]) -> list[MicroSteps]:
    """Loops over ``range(k)`` that toggle ``require_backward_grad_sync`` and run a backward, and step no
    optimizer (the step follows the loop); ``k`` readable where the accelerator is made."""
    found = []
    for loop in facts.loops:
        iterable = loop.node.iter
        if not (isinstance(iterable, cst.Call) and loop.scope.imports.qualname(iterable.func) in ("range", "builtins.range")
                and len(iterable.args) == 1):
            continue
        inside = [t for t in toggles if t in loop.stmts]
        if not inside or not any(plan.reaches_backward(s) for s in loop.calls):
            continue
        if any(s.method == "step" for s in loop.calls) or home is None or not _readable(home, iterable.args[0].value):
            continue
        steps = iterable.args[0].value
        micro = MicroSteps(loop, steps)
        for toggle in inside:
            guard = facts.parent_stmt.get(toggle)
            alone = isinstance(guard, cst.If) and guard.orelse is None and isinstance(guard.body, cst.IndentedBlock) and len(guard.body.body) == 1
            micro.toggles.append(guard if alone else toggle)  # type: ignore[arg-type]
        holder = Accumulation(loop, cst.If(test=cst.Name("_"), body=cst.IndentedBlock([])), steps)
        _divisions(facts, loop, list(loop.stmts), holder)
        micro.divisions, micro.loss = holder.divisions, holder.loss
        micro.models = _models(plan, loop)
        if micro.models:
            found.append(micro)
    return found
