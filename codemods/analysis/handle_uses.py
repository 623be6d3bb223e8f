"""Where a log handle is used, and whether every use can run on the main process alone.

``writer = SummaryWriter(log_dir)`` (or a ``Logger`` of the program wrapping one) opened on every process writes
N copies of one training's log. It can be made on the main process only (``... if accelerator.is_main_process else
None``) when every later use of the handle is a statement that only calls one of its methods
(``writer.add_scalar("loss", loss.item(), step)``, ``writer.close()``): each such statement then runs under ``if
accelerator.is_main_process:``. Anything else keeps the handle on every process, with the reason:

- the handle read in another way (passed to a function, returned, stored, an attribute read: ``writer.log_dir``),
  since on the other processes it is ``None``;
- a call in the arguments that may reach the other processes (a ``gather``/``reduce``/barrier, a backward, a
  ``torch.distributed`` call, or a function of the program that makes one), or a method of the program's logger that
  makes one (a barrier another rule writes in it): under the gate only the main process would reach it, and the
  others would wait for it forever;
- the handle bound more than once, or in a scope without the accelerator.

A branch taken only where the handle exists (``if writer is not None:``, ``if writer:``) is a use too, when nothing in
it reaches the other processes: with ``writer = SummaryWriter(...) if args.tensorboard else None`` on every process
it is already how the script writes, and the main process alone then takes it.

``self.writer = SummaryWriter(...)`` in a method is followed through ``self.writer`` in every method of its class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.tree_walk import descendants
from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.snippets import code_of

# calls every process must reach together (the runtime's collectives, and what the converted code calls them)
COLLECTIVE_METHODS = frozenset({
    "gather", "gather_for_metrics", "gather_object", "reduce", "pad_across_processes", "wait_for_everyone",
    "check_trigger", "save_state", "load_state", "backward", "all_reduce", "all_gather", "broadcast", "barrier",
    "broadcast_object_list", "all_gather_object", "reduce_scatter",
})


@dataclass
class HandleUses:
    """The statements that use a handle, each a call of one of its methods, or why it cannot be kept to one process."""

    key: str  # ``writer`` or ``self.writer``
    uses: list[tuple[Scope, cst.SimpleStatementLine, CallSite]] = field(default_factory=list)
    problem: str | None = None


class ProposedEdits(Protocol):
    """What is read of the edits proposed so far (``engine.edits.Edits``)."""

    holders: dict[cst.CSTNode, cst.BaseStatement]

    def replaced(self, node: cst.CSTNode) -> bool: ...

    def replacement_of(self, node: cst.CSTNode) -> cst.CSTNode | None: ...

    def inserted(self) -> Iterable[tuple[cst.BaseStatement, bool, cst.BaseStatement]]: ...


class Collectives:
    """Which calls reach the other processes once the conversion is done: the collectives the code calls by name,
    a prepared model's forward (DistributedDataParallel may synchronise buffers), and the program's functions that
    call one or where an edit proposed so far writes one (the evaluation's gather, a reduction)."""

    def __init__(self, facts: Facts, plan: Plan, edits: ProposedEdits) -> None:
        self.facts, self.plan, self.edits = facts, plan, edits
        self.edited: set[int] = set()  # ids of the functions an edit writes a collective in
        found = [(anchor, new) for anchor, _, new in edits.inserted()]
        found += [(holder, edits.replacement_of(node)) for node, holder in edits.holders.items()]
        for anchor, new in found:
            if has_collective(new):
                self.edited.update(id(s) for s in facts.chain(anchor) if isinstance(s, cst.FunctionDef))

    def in_arguments(self, site: CallSite) -> str | None:
        """The first call in ``site``'s arguments that reaches the other processes (or an edit that writes one
        there), or None."""
        for arg in site.node.args:
            for node in descendants(arg.value):
                if self.edits.replaced(node) and has_collective(self.edits.replacement_of(node)):
                    return code_of(node)
                inner = self.facts.sites.get(node) if isinstance(node, cst.Call) else None
                if inner is not None and self.reaches(inner):
                    return code_of(inner.node.func)
        return None

    def reaches(self, site: CallSite, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``site`` is a collective, or calls, through the program, a function that makes one."""
        if site.method in COLLECTIVE_METHODS or (site.qualname or "").startswith("torch.distributed."):
            return True
        if self.plan.prepared_model(site.scope, site.node.func, site.stmt) is not None:
            return True
        for function in [self.plan.callee(site), *self.plan.callbacks(site)]:
            if function is not None and id(function) not in seen:
                if id(function.node) in self.edited or any(self.reaches(s, seen | {id(function)}) for s in function.calls):
                    return True
        return False


def reaches_others(facts: Facts, plan: Plan, edits: ProposedEdits, block: cst.BaseStatement) -> bool:
    """Whether something in ``block`` trains or otherwise reaches the other processes."""
    collectives = Collectives(facts, plan, edits)
    return any(block in facts.chain(s.stmt) and (plan.reaches_backward(s) or collectives.reaches(s))
               for s in facts.calls)


def has_collective(node: cst.CSTNode | None) -> bool:
    """Whether ``node`` (code an edit writes) calls a collective by name."""
    return node is not None and any(
        isinstance(c.func, cst.Attribute) and c.func.attr.value in COLLECTIVE_METHODS for c in m.findall(node, m.Call())
    )


def handle_uses(
    facts: Facts, scope: Scope, stmt: cst.BaseStatement, target: cst.BaseExpression, collectives: Collectives
) -> HandleUses:
    """The uses of the handle that ``stmt`` (in ``scope``) binds to ``target``."""
    key = code_of(target)
    found = HandleUses(key)
    readers = _reading_scopes(facts, scope, target)
    if readers is None:
        found.problem = f"`{key}` is bound where its uses cannot all be followed (a name, or `self.<name>` of a class without subclasses, can)"
        return found
    owner = scope.class_scope if key.startswith("self.") else scope
    bindings = owner.bindings.get(key, []) if owner is not None else []
    if len(bindings) != 1 or bindings[0].stmt is not stmt:
        found.problem = f"`{key}` is bound more than once"
        return found
    for reader in readers:
        by_node = {id(c.node.func.value): c for c in reader.calls if isinstance(c.node.func, cst.Attribute)}
        tested = [h for r in reader.refs.get(key, []) if isinstance(h := reader.holders.get(id(r)), cst.If)
                  and _tests_handle(h.test, key)]
        for branch in tested:
            reached = next((c for c in reader.calls if branch in facts.chain(c.stmt) and collectives.reaches(c)), None)
            if reached is not None:
                found.problem = f"`{_first_line(branch)}` runs `{code_of(reached.node.func)}`, which every process must reach"
                return found
        for ref in reader.refs.get(key, []):
            holder = reader.holders.get(id(ref))
            site = by_node.get(id(ref))
            if holder is stmt or (holder is not None and any(b in facts.chain(holder) for b in tested)):
                continue  # ``if writer is not None: writer.add_scalar(...)``: only where it was made
            if site is None or not alone(site):
                found.problem = f"`{key}` is used other than by calling one of its methods in a statement of its own" \
                    + (f" (`{_first_line(holder)}`)" if holder is not None else "")
                return found
            reached = collectives.in_arguments(site)
            if reached is not None:
                found.problem = f"`{_first_line(site.stmt)}` calls `{reached}` in its arguments, which every process must reach"
                return found
            if collectives.reaches(site):  # ``logger.save_models(G, D)`` whose method waits for the others
                found.problem = f"`{_first_line(site.stmt)}` runs a call that every process must reach"
                return found
            found.uses.append((reader, site.stmt, site))  # type: ignore[arg-type]
    return found


def _tests_handle(test: cst.BaseExpression, key: str) -> bool:
    """``if writer:`` / ``if writer is not None:``: a branch taken only where the handle was made."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        op = test.comparisons[0]
        return isinstance(op.operator, cst.IsNot) and m.matches(op.comparator, m.Name("None")) and code_of(test.left) == key
    return code_of(test) == key


def _reading_scopes(facts: Facts, scope: Scope, target: cst.BaseExpression) -> list[Scope] | None:
    """The scopes whose loads of ``target`` read this binding: for a name, those that resolve it to ``scope``; for
    ``self.x`` in a method, every method of that class."""
    if isinstance(target, cst.Name):
        name = target.value
        return [s for s in facts.scopes if s.unit == scope.unit and name in s.refs and s.resolve(name) is scope]
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
        cls = scope.class_scope
        if cls is None or facts.subclasses(cls):
            return None  # a subclass's methods read it too
        return [s for s in facts.scopes if s.class_scope is cls or (s.kind == "function" and s.inside(cls) and s.class_scope is None)]
    return None


def alone(site: CallSite) -> bool:
    """Whether ``site`` is a statement of its own: ``writer.add_scalar(...)`` on a line (no value kept)."""
    stmt = site.stmt
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr) \
        and stmt.body[0].value is site.node


_CLOCK = ("time.time", "time.strftime", "time.localtime", "datetime.")
_RANKS = ("process_index", "local_process_index", "rank", "local_rank", "get_rank")


def clock_named(plan: Plan, site: CallSite) -> bool:
    """``SummaryWriter(f"runs/{run_name}")`` with ``run_name = f"{env}__{int(time.time())}"`` (cleanrl): a name
    that differs between processes only by the clock is one run's log, opened N times (the processes start within
    the same second, or write N folders of one training), not a file of each process's own; a name that reads the
    process's rank is."""
    exprs: list[cst.CSTNode] = [a.value for a in site.node.args]
    for arg in list(exprs):
        for name in m.findall(arg, m.Name()):
            binding = plan.binding_of(site.scope, name.value)  # type: ignore[attr-defined]
            if binding is not None and binding.value is not None:
                exprs.append(binding.value)
    imports = site.scope.imports
    clock = any((imports.qualname(c.func) or "").startswith(_CLOCK) for e in exprs for c in m.findall(e, m.Call()))  # type: ignore[attr-defined]
    rank = any(n.value in _RANKS for e in exprs for n in m.findall(e, m.Name()))  # type: ignore[attr-defined]
    return clock and not rank


def _first_line(stmt: cst.CSTNode) -> str:
    return code_of(stmt).strip().splitlines()[0]
