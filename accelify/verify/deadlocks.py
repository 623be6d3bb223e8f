"""The static half of verify: collectives the converted program may reach a different number of times per process.

A collective (``wait_for_everyone``, ``gather``, ``reduce``, a DDP backward, ``torch.distributed.all_reduce``...)
returns only when every process reaches it. One under a condition on a process-local value (a batch's loss, the
rank, the clock) is a deadlock waiting for the data that makes the processes disagree, even when a short run
happens to take the same branch everywhere; a ``break`` or ``continue`` under such a condition in the loop around
a collective is the same. The check reads the converted program with the converter's own agreement analysis
(``codemods.analysis.agreement``), the one the rules ask before they place a collective, so a conversion the
converter itself would not have written fails here too, naming the line.

It errs as the analysis does, towards "may differ": a finding is a line to look at, and the fix it names is the
one the converter would have written (decide on every process: reduce or ``check_trigger`` first). One exception
is proved here: a test on the size of a prepared map-style loader's batch (``if x.size(0) != batch_size:
continue``), the same on every process under ``even_batches`` (``even_batches.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.collect import collect
from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.verify.even_batches import even_batch_size_test

if TYPE_CHECKING:
    from accelify.verify.report import CheckResult
    from accelify.verify.workspace import ScriptFiles

# methods of the accelerator every process must reach together
_ACCELERATOR_ONLY = ("wait_for_everyone", "gather_for_metrics", "check_trigger", "pad_across_processes",
                     "save_state", "end_training", "main_process_first")
_ACCELERATOR_TOO = ("gather", "reduce", "backward", "prepare", "broadcast")  # common names: on an accelerator only
_TORCH_DISTRIBUTED = ("barrier", "all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list",
                      "reduce", "gather", "scatter", "all_to_all", "reduce_scatter", "all_gather_into_tensor",
                      "reduce_scatter_tensor", "monitored_barrier")
_ACCELERATE_UTILS = ("accelerate.utils.gather", "accelerate.utils.reduce", "accelerate.utils.broadcast",
                     "accelerify.runtime.gather", "accelerify.runtime.reduce", "accelerify.runtime.broadcast")


@dataclass(frozen=True)
class Deadlock:
    """A collective (``call``, at ``file``:``line``) that processes may reach a different number of times, and why."""

    file: str
    line: int
    call: str
    why: str

    def format(self) -> str:
        return f"{self.file}:{self.line}: {self.call} {self.why}"


class _NoEdits:
    """A converted program is read as it is: no edits are proposed over it."""

    removed: set[cst.BaseStatement] = set()
    holders: dict[cst.CSTNode, cst.BaseStatement] = {}

    def inserted(self) -> list[tuple[cst.BaseStatement, bool, cst.BaseStatement]]:
        return []

    def replacement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return None


def latent_deadlocks(script: tuple[str, str], modules: tuple[tuple[str, str], ...] = ()) -> list[Deadlock]:
    """The collectives of the program (``script`` and its local ``modules``, each ``(file name, source)``) that
    sit under a condition, a loop or a loop exit on a process-local value. A file that does not parse is left out
    (the runs report it)."""
    units: dict[str, tuple[str, cst.Module]] = {}
    for index, (name, source) in enumerate((script, *modules)):
        try:
            units["__main__" if index == 0 else name.removesuffix(".py")] = (name, cst.parse_module(source))
        except cst.ParserSyntaxError:
            if index == 0:
                return []
    every = [collect(module, unit) for unit, (_, module) in units.items()]
    program = Facts.program(every[0], every[1:]) if len(every) > 1 else every[0]
    plan = Plan(program)
    agreement = Agreement(program, plan, _NoEdits())
    lines: dict[str, dict[cst.CSTNode, int]] = {}
    found: list[Deadlock] = []
    for site in program.calls:
        what = _collective(site, program, plan)
        if what is None:
            continue
        why = _why(agreement, program, site)
        if why is None:
            continue
        unit = _unit_of(program, site.scope)
        file, module = units[unit]
        if unit not in lines:
            positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
            lines[unit] = {node: pos.start.line for node, pos in positions.items()}
        found.append(Deadlock(file, lines[unit].get(site.node, 0), what, why))
    return sorted(found, key=lambda d: (d.file != script[0], d.file, d.line))


def _collective(site: CallSite, facts: Facts, plan: Plan) -> str | None:
    """``accelerator.gather(...)`` as the name to show when ``site`` calls a collective, else None."""
    qualname = site.qualname or ""
    if qualname.startswith("torch.distributed.") and qualname.rsplit(".", 1)[-1] in _TORCH_DISTRIBUTED:
        return qualname.replace("torch.distributed.", "dist.", 1) + "()"
    if qualname in _ACCELERATE_UTILS:
        return qualname.rsplit(".", 1)[-1] + "()"
    func = site.node.func
    if not isinstance(func, cst.Attribute) or site.method is None:
        return None
    receiver = dotted(func.value) or ""
    if site.method in _ACCELERATOR_ONLY or (site.method in _ACCELERATOR_TOO and _is_accelerator(plan, site.scope, func.value, receiver)):
        return f"{receiver or '...'}.{site.method}()"
    return None


def _is_accelerator(plan: Plan, scope: Scope, expr: cst.BaseExpression, receiver: str) -> bool:
    """Whether ``receiver`` names the program's ``Accelerator`` (made by it, or passed in under that name)."""
    return receiver.rsplit(".", 1)[-1] in ("accelerator", "accel") or plan.made_accelerator(scope, expr)


def _why(agreement: Agreement, facts: Facts, site: CallSite) -> str | None:
    """Why processes may reach ``site`` a different number of times, or None when they agree."""
    chain = facts.chain(site.stmt)
    for outer in chain[1:]:
        if isinstance(outer, (cst.If, cst.While)) and not _uniform(agreement, site.scope, outer.test, outer):
            kind = "an `if`" if isinstance(outer, cst.If) else "a `while`"
            return (f"sits under {kind} whose test may differ between processes (`{_code(facts, outer.test)}`): "
                    "processes that skip it leave the others waiting. Decide on every process alike (reduce the "
                    "value first, or accelerator.check_trigger()), or move the call out of the branch")
        if isinstance(outer, cst.For):
            if not agreement._loop_agrees(site.scope, outer):
                return (f"sits in a loop whose items may differ between processes (`{_code(facts, outer.iter)}`): "
                        "processes that walk fewer items leave the others waiting")
        if isinstance(outer, (cst.For, cst.While)):
            exit_ = _local_exit(agreement, facts, site, outer)
            if exit_ is not None:
                return exit_
    if not agreement._function_agreed(site.scope):
        return (f"is in `{site.scope.name}`, which some call site reaches under a condition that may differ between "
                "processes: processes that do not call it leave the others waiting")
    return None


def _uniform(agreement: Agreement, scope: Scope, test: cst.BaseExpression, at: cst.BaseStatement) -> bool:
    """The test has the same value on every process: as the analysis finds, or as a prepared loader's batch size
    (``even_batches``)."""
    return agreement.uniform(scope, test, at) or even_batch_size_test(agreement, scope, test, at)


def _local_exit(agreement: Agreement, facts: Facts, site: CallSite, loop: cst.For | cst.While) -> str | None:
    """A ``break`` (anywhere in ``loop``) or a ``continue`` (before ``site``) under a process-local test."""
    at = facts.order[site.stmt][0]
    for node in _exits(loop.body):
        stmt = node
        if isinstance(node, cst.Continue) and facts.order.get(_line_of(facts, node), (at,))[0] > at:
            continue
        line = _line_of(facts, node)
        if line is None:
            continue
        for outer in facts.chain(line)[1:]:
            if outer is loop:
                break
            if isinstance(outer, (cst.If, cst.While)) and not _uniform(agreement, site.scope, outer.test, outer):
                word = "break" if isinstance(stmt, cst.Break) else "continue"
                return (f"sits in a loop that one process may leave early (`{word}` under "
                        f"`if {_code(facts, outer.test)}`, a test that may differ between processes): the others "
                        "then wait at it. Decide on every process alike (accelerator.reduce the value, or "
                        "set_trigger()/check_trigger())")
    return None


def _exits(body: cst.BaseSuite) -> list[cst.CSTNode]:
    """The ``break``/``continue`` statements of a loop body that belong to it (not to a nested loop or function)."""
    out: list[cst.CSTNode] = []
    pending: list[cst.CSTNode] = [body]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Break, cst.Continue)):
            out.append(node)
        elif not isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            pending.extend(node.children)
    return out


def _line_of(facts: Facts, node: cst.CSTNode) -> cst.BaseStatement | None:
    return next((s for s in facts.parent_stmt if isinstance(s, cst.SimpleStatementLine) and node in s.body), None)


def _unit_of(facts: Facts, scope: Scope) -> str:
    while scope.parent is not None:
        scope = scope.parent
    return next((unit for unit, f in facts.units.items() if f.module_scope is scope), "__main__")


def _code(facts: Facts, node: cst.CSTNode) -> str:
    text = cst.Module([]).code_for_node(node).strip()
    return text if len(text) <= 60 else text[:57] + "..."


def deadlock_check(files: ScriptFiles, stage: str) -> CheckResult:
    """The ``no latent deadlock`` check of a converted program (the script and the local modules it imports)."""
    from accelify.verify.report import FAILED, PASSED, CheckResult
    from accelify.verify.workspace import imported_modules

    used = imported_modules(files)
    found = latent_deadlocks((files.name, files.source), tuple(m for m in files.modules if m[0] in used))
    if not found:
        return CheckResult(NAME, stage, PASSED, "every collective is reached alike on every process (read statically)")
    return CheckResult(NAME, stage, FAILED, "; ".join(d.format() for d in found),
                       "a latent deadlock: the processes wait for each other forever once their data make them take "
                       "different branches, even where a short run does not show it")


NAME = "no latent deadlock"
