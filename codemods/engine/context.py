"""What a rule sees: the facts, the plan, and the ways to propose edits and warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import libcst as cst

from accelify.codemods.codes import Code
from accelify.codemods.engine.edits import Edits, Replacement
from accelify.codemods.analysis.facts import Facts, Scope
from accelify.codemods.analysis.names import ImportMap
from accelify.codemods.analysis.snippets import statement
from accelify.codemods.engine.outcome import ConversionWarning
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.engine.targets import DEFAULT_TARGET, import_module

if TYPE_CHECKING:
    from accelify.codemods.analysis.agreement import Agreement
    from accelify.codemods.analysis.gradient_accumulation import Accumulation, MicroSteps
    from accelify.codemods.analysis.mixed_precision import Amp

# A warning about a node; the node's position is resolved once, at the end, by the engine.
Located = tuple[cst.CSTNode, ConversionWarning]


class Abort(Exception):
    """Raised by a rule when the file cannot be converted safely; the warnings explain why."""

    def __init__(self, first: Located, *more: Located) -> None:
        super().__init__(first[1].message)
        self.warnings = (first, *more)  # every place that stops the conversion


@dataclass
class Context:
    """Shared state of one conversion; rules run in order and read what earlier rules decided."""

    facts: Facts
    plan: Plan
    target: str = DEFAULT_TARGET
    edits: Edits = field(init=False)
    warnings: list[Located] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    consumed: set[cst.CSTNode] = field(default_factory=set)  # loads that edits remove
    handled: set[cst.CSTNode] = field(default_factory=set)  # calls a rule already rewrote
    unwrapped: set[cst.CSTNode] = field(default_factory=set)  # model expressions already sent through unwrap_model
    needs: set[Scope] = field(default_factory=set)  # functions a rule rewrote to read the accelerator (threading gives it)
    runtime_imports: list[str] = field(default_factory=list)  # names imported with Accelerator (DistributedDataParallelKwargs)
    accelerators: dict[Scope, str] = field(default_factory=dict)  # scope -> "accelerator" / "self.accelerator"
    # where the accelerator is created: (statement, True) right after it, (statement, False) right before it
    accelerator_at: tuple[cst.BaseStatement, bool] | None = None
    # what the evaluation rule made global: names gathered right after a statement (or right before one
    # in ``gathered_before``), and forward calls replaced by a gathered name
    gathered_stmts: dict[cst.BaseStatement, set[str]] = field(default_factory=dict)
    gathered_before: set[cst.BaseStatement] = field(default_factory=set)
    gathered_nodes: set[cst.CSTNode] = field(default_factory=set)
    _agreement: "Agreement | None" = None
    amp: "Amp | None" = None  # the script's hand-written mixed precision (found by the accelerator rule)
    accumulations: "list[Accumulation]" = field(default_factory=list)  # hand-written accumulation (idem)
    unconverted_accumulation: list[cst.If] = field(default_factory=list)  # accumulation in a shape left alone
    micro_steps: "list[MicroSteps]" = field(default_factory=list)  # nanoGPT's micro-step accumulation (idem)

    def __post_init__(self) -> None:
        self.edits = Edits(self.facts.parent_stmt)

    @property
    def imports_map(self) -> ImportMap:
        """The script's imports (a rule looking at a call uses ``site.scope.imports``: its own module's)."""
        return self.facts.imports

    @property
    def import_module(self) -> str:
        return import_module(self.target)

    @property
    def agreement(self) -> "Agreement":
        """Which values and branches agree between processes (built on first use, after the evaluation
        rule has recorded what it gathers)."""
        if self._agreement is None:
            from accelify.codemods.analysis.agreement import Agreement

            self._agreement = Agreement(self)
        return self._agreement

    # where the accelerator is -----------------------------------------------------------------
    def accelerator_in(self, scope: Scope) -> str | None:
        """The expression that names the accelerator in ``scope`` (closures see their parent's)."""
        current: Scope | None = scope
        while current is not None:
            if current in self.accelerators:
                return self.accelerators[current]
            if current.kind != "function":
                return None
            if current.parent is not None and current.parent.kind == "class":
                # a method sees the trainer's `self.accelerator`; a static method has no `self`
                return self.accelerators.get(current.parent) if current.class_scope is not None else None
            current = current.parent
        return None

    def after_accelerator(self, scope: Scope, stmt: cst.BaseStatement, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``stmt`` in ``scope`` runs after the accelerator exists.

        In the home scope, by position. A function nested in the home runs when it is called: it is
        after the accelerator when it is defined after it, or when every call of it is (a ``log``
        helper called before the accelerator exists keeps its plain ``print``). Other scopes that
        have the accelerator (helpers it is passed to, methods of a trainer) run after it exists."""
        if self.accelerator_in(scope) is None:
            return False
        home = self.plan.home
        if self.accelerator_at is None or home is None:
            return True
        if scope is home:
            return self._after_creation(stmt)
        nested = scope
        while nested.parent is not None and nested.parent is not home:
            nested = nested.parent
        if nested.parent is not home or nested.kind != "function" or id(nested) in seen or home.kind == "class":
            return True
        if self._after_creation(nested.node):  # type: ignore[arg-type]
            return True
        sites = self.plan.call_sites(nested)
        return bool(sites) and all(self.after_accelerator(s.scope, s.stmt, seen | {id(nested)}) for s in sites)

    def _after_creation(self, stmt: cst.BaseStatement) -> bool:
        assert self.accelerator_at is not None
        anchor, after = self.accelerator_at
        order = self.facts.order
        return order[stmt][0] > order[anchor][1] if after else order[stmt][0] >= order[anchor][0]

    # edits ------------------------------------------------------------------------------------
    def is_skipped(self, stmt: cst.BaseStatement) -> bool:
        """Whether ``stmt`` or a statement around it carries ``# accelify: skip``."""
        return any(s in self.facts.skipped for s in self.facts.chain(stmt))

    def replace(self, node: cst.CSTNode, stmt: cst.BaseStatement, fn: Replacement) -> bool:
        if self.is_skipped(stmt):
            return False
        self.edits.replace(node, stmt, fn)
        return True

    def insert_before(self, stmt: cst.BaseStatement, code: Sequence[str]) -> None:
        self.edits.insert_before(stmt, [statement(line) for line in code])

    def insert_after(self, stmt: cst.BaseStatement, code: Sequence[str]) -> None:
        self.edits.insert_after(stmt, [statement(line) for line in code])

    def remove(self, stmt: cst.BaseStatement) -> bool:
        if self.is_skipped(stmt):
            return False
        self.edits.remove(stmt)
        return True

    def change(self, description: str) -> None:
        if description not in self.changes:
            self.changes.append(description)

    # warnings ---------------------------------------------------------------------------------
    def warning(self, code: Code, node: cst.CSTNode, **fields: str) -> Located:
        """The warning ``code`` about ``node``, its message and fix filled from ``fields``."""
        return node, ConversionWarning(code.code, code.message.format(**fields), code.fix.format(**fields))

    def warn(self, code: Code, node: cst.CSTNode, **fields: str) -> None:
        located = self.warning(code, node, **fields)
        if all(n is not node or w.code != code.code for n, w in self.warnings):
            self.warnings.append(located)

    def abort(self, code: Code, node: cst.CSTNode, **fields: str) -> None:
        """Stop converting this file: it is refused (left unchanged, needing attention), with this warning."""
        raise Abort(self.warning(code, node, **fields))
