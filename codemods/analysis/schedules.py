"""How often a learning-rate scheduler is stepped: once per batch, or once per pass over the data.

A prepared scheduler (``AcceleratedScheduler``, ours and Hugging Face Accelerate's) moves ``num_processes``
times per ``step()`` call: each process sees 1/N of the batches, so a schedule written in batches for one
process ends on time on N. That is right only for a scheduler stepped once per batch. One stepped once per
epoch (``StepLR(optimizer, step_size=2)`` after ``train(...)``) would move N epochs per epoch: it stays out of
``prepare`` and is stepped, as in the original, once per epoch on every process.

``per_batch(plan, scheduler)`` looks at every ``.step()`` call on the scheduler and at the innermost ``for`` or
``while`` loop around it:

- per batch: that loop walks a data loader, or steps an optimizer at its own level (a ``while`` loop driven by a
  step counter, ``for it in range(max_iters)`` with ``next(data_iter)``), directly or through a helper that steps
  it with no loop of its own (``train_step(batch)``);
- per epoch: that loop holds a loop that trains, or calls a helper that does (``train(model, loader)``), or the
  call is in a function that trains over the data itself before or after it (``train_one_epoch``'s last line);
- a step call outside any loop of its function is decided at the function's call sites (``on_epoch_end()``
  called after the batch loop, ``training_step(batch)`` called from it);
- a catch-up: a loop that does nothing but step schedulers (``for epoch in range(0, start_epoch):
  scheduler.step()``, resuming) counts in whatever unit the other steps count, so it decides nothing: without it a
  per-epoch scheduler would read as mixed and be prepared (siamese-triplet's ``fit``, copied widely).

The answer is ``True`` (every call per batch), ``False`` (every call per epoch) or ``None`` (mixed, no call, or
a shape this cannot read; ``Plan`` then keeps the scheduler in ``prepare`` as before).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.analysis.prepared_uses import PreparedUses as Plan  # the plan's questions (origins, the call graph)

_LOOPS = (cst.For, cst.While)
_DEFINITIONS = (cst.FunctionDef, cst.ClassDef)


def per_batch(plan: Plan, scheduler: Binding) -> bool | None:
    """Whether every ``step()`` of ``scheduler`` runs once per batch (see the module docstring). A name bound to a
    scheduler in several places (``if args.dataset == "svhn": scheduler = MultiStepLR(...) else: scheduler =
    MultiStepLR(...)``) is one scheduler for this question: its step calls are every binding's."""
    alike = _same_name(scheduler)
    sites = [s for s in plan.facts.calls if _steps_scheduler(plan, s, alike)]
    deciding = [s for s in sites if not _catch_up(plan, s, alike)]
    answers = {_site(plan, s.scope, s.stmt, frozenset()) for s in deciding}
    return answers.pop() if len(answers) == 1 else None


def _catch_up(plan: Plan, site: CallSite, alike: list[Binding]) -> bool:
    """Whether ``site`` is in a loop that only steps the scheduler before the training (a resume's catch-up, a
    warm-up fast-forward): the loop walks no data, every call in it is a step of the scheduler or a call outside
    the program (``print``; a call of the program's own functions could train), and after it its function trains
    or steps the scheduler again (a loop of steps after all the training is a schedule of its own)."""
    loop = enclosing_loop(plan, site.stmt)
    if loop is None or (isinstance(loop, cst.For) and _walks_loader(plan, site.scope, loop)):
        return False
    for other in site.scope.calls:
        if other is site or not _within(plan, other.stmt, loop):
            continue
        if _steps_scheduler(plan, other, alike):
            continue
        if plan.callee(other) is not None or plan.reaches_backward(other) or _steps_optimizer(plan, other, frozenset()):
            return False
    return any(
        plan.facts.after(other.stmt, loop) and (_steps_scheduler(plan, other, alike) or _trains_at(plan, other))
        for other in site.scope.calls
    )


def _steps_scheduler(plan: Plan, site: CallSite, alike: list[Binding]) -> bool:
    func = site.node.func
    return site.method == "step" and isinstance(func, cst.Attribute) and plan.origin(site.scope, func.value) in alike


def _trains_at(plan: Plan, site: CallSite) -> bool:
    """Whether ``site`` makes a backward, steps an optimizer or calls a function that trains."""
    callee = plan.callee(site)
    return plan.reaches_backward(site) or _steps_optimizer(plan, site, frozenset()) or (
        callee is not None and _trains(plan, callee, frozenset()))


def _same_name(scheduler: Binding) -> list[Binding]:
    """``scheduler`` and the other bindings of its name in its scope that make a scheduler (the branches of an
    ``if``/``else``): a step call's origin is one of them (the first), whichever the program ran."""
    alike = [b for b in scheduler.scope.bindings.get(scheduler.key, []) if b.role == "scheduler"]
    return alike if scheduler in alike else [scheduler, *alike]


def enclosing_loop(plan: Plan, stmt: cst.BaseStatement) -> cst.For | cst.While | None:
    """The innermost ``for``/``while`` of its function around ``stmt`` (not ``stmt`` itself)."""
    for node in plan.facts.chain(stmt)[1:]:
        if isinstance(node, _DEFINITIONS):
            return None
        if isinstance(node, _LOOPS):
            return node
    return None


def _site(plan: Plan, scope: Scope, stmt: cst.BaseStatement, seen: frozenset[int]) -> bool | None:
    """How often a statement of ``scope`` runs: per batch, per epoch, or unknown."""
    loop = enclosing_loop(plan, stmt)
    if loop is None:
        if scope.kind != "function" or id(scope) in seen:
            return None
        if _trains(plan, scope, frozenset()):
            return False  # ``train_one_epoch``: a pass over the data, and the step once around it
        sites = plan.call_sites(scope)
        answers = {_site(plan, s.scope, s.stmt, seen | {id(scope)}) for s in sites}
        return answers.pop() if len(answers) == 1 else None
    if isinstance(loop, cst.For) and _walks_loader(plan, scope, loop):
        return True
    inside = [s for s in scope.calls if s.stmt is not loop and _within(plan, s.stmt, loop)]
    if any(enclosing_loop(plan, s.stmt) is loop and _steps_optimizer(plan, s, frozenset()) for s in inside):
        return True
    for s in inside:
        nested = enclosing_loop(plan, s.stmt) is not loop
        if nested and (plan.reaches_backward(s) or _steps_optimizer(plan, s, frozenset())):
            return False  # the batch loop is inside this one
        function = plan.callee(s)
        if not nested and function is not None and _trains(plan, function, frozenset()):
            return False  # ``train(model, loader, optimizer)`` once per epoch
    return None


def _walks_loader(plan: Plan, scope: Scope, node: cst.For) -> bool:
    loop = next((lp for lp in scope.loops if lp.node is node), None)
    found = plan.origin(scope, plan.loop_source(loop)) if loop is not None else None
    return found is not None and found.role == "loader"


def _within(plan: Plan, stmt: cst.BaseStatement, outer: cst.BaseStatement) -> bool:
    return any(node is outer for node in plan.facts.chain(stmt)[1:])


def _steps_optimizer(plan: Plan, site: CallSite, seen: frozenset[int]) -> bool:
    """``optimizer.step()``, ``scaler.step(optimizer)``, or a call of a helper that makes one outside any loop."""
    if site.method == "step" and isinstance(site.node.func, cst.Attribute):
        receivers = [site.node.func.value, *(a.value for a in site.node.args if not a.star)]
        if any(plan.role(site.scope, r) == "optimizer" for r in receivers):
            return True
    function = plan.callee(site)
    if function is None or id(function) in seen:
        return False
    return any(
        enclosing_loop(plan, s.stmt) is None and _steps_optimizer(plan, s, seen | {id(function)}) for s in function.calls
    )


def _trains(plan: Plan, function: Scope, seen: frozenset[int]) -> bool:
    """Whether ``function`` runs a training loop: a loop in it that reaches ``backward`` or steps an optimizer,
    or a call of a function that does."""
    if id(function) in seen:
        return False
    for site in function.calls:
        if enclosing_loop(plan, site.stmt) is not None and (plan.reaches_backward(site) or _steps_optimizer(plan, site, frozenset())):
            return True
        callee = plan.callee(site)
        if callee is not None and _trains(plan, callee, seen | {id(function)}):
            return True
    return False
