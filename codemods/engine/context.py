"""What a rule sees: the facts, the plan, and the ways to propose edits and warnings.

A rule keeps nothing here for another rule. What it needs to know about the program it asks the plan
(``ctx.plan``, and ``ctx.plan.analysis(X)`` for an analysis built once and shared); what another rule already
did it reads from the edits proposed so far (``rewritten``, ``dropped``, ``accelerator_in``, ``agreement``).
The only things a conversion accumulates are its outputs: the edits, the warnings and the change notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import libcst as cst

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import Facts, Scope
from accelify.codemods.analysis.import_time import LITERAL_CPU, EntryLevel
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.names import ImportMap
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.snippets import statement
from accelify.codemods.analysis.statement_shapes import is_docstring, is_import
from accelify.codemods.codes import Code
from accelify.codemods.engine.edits import Edits, Regroup, Replacement
from accelify.codemods.engine.outcome import ConversionWarning
from accelify.codemods.engine.targets import DEFAULT_TARGET, import_module

# A warning about a node; the node's position is resolved once, at the end, by the engine.
Located = tuple[cst.CSTNode, ConversionWarning]
# A replacement that writes the accelerator: ``fn(updated node, the accelerator's name in the scope)``.
Through = Callable[[cst.CSTNode, str], cst.CSTNode]


class Abort(Exception):
    """Raised by a rule when the file cannot be converted safely; the warnings explain why."""

    def __init__(self, first: Located, *more: Located) -> None:
        super().__init__(first[1].message)
        self.warnings = (first, *more)  # every place that stops the conversion


@dataclass
class Context:
    """One conversion as the rules see it: what the program is (``facts``, ``plan``) and what is proposed so far
    (``edits``, ``warnings``, ``changes``)."""

    facts: Facts
    plan: Plan
    target: str = DEFAULT_TARGET
    notebook: bool = False  # a notebook's cells: its modules are imported once, in the process that launches the others
    edits: Edits = field(init=False)
    warnings: list[Located] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    _agreement: Agreement | None = field(default=None, init=False, repr=False)
    # converted code (a second look): where the code itself creates the accelerator, instead of the plan's place
    created: tuple[Scope, cst.BaseStatement] | None = field(default=None, init=False, repr=False)

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
    def agreement(self) -> Agreement:
        """Which values and branches agree between processes, from the plan and the edits proposed when it is
        first asked (the gathers the evaluation rule inserts, the statements removed)."""
        if self._agreement is None:
            self._agreement = Agreement(self.facts, self.plan, self.edits)
        return self._agreement

    # where the accelerator is: declared by the edits that create it or pass it in ---------------------
    @property
    def accelerating(self) -> bool:
        """Whether an edit creates the accelerator (the accelerator rule did: the conversion goes ahead)."""
        return bool(self.edits.accelerators)

    def accelerator_in(self, scope: Scope) -> str | None:
        """The expression that names the accelerator in ``scope`` (closures see their parent's)."""
        bound = self.edits.accelerators
        current: Scope | None = scope
        while current is not None:
            if current in bound:
                return bound[current]
            if current.kind != "function":
                return None
            if current.parent is not None and current.parent.kind == "class":
                # a method sees the trainer's `self.accelerator`; a static method has no `self`
                if current.class_scope is None:
                    return None
                return bound.get(current.parent) or self._inherited(current)
            current = current.parent
        return None

    def _inherited(self, method: Scope) -> str | None:
        """A base class's method runs on the instances of its subclasses (``BaseTrainer.train`` on a ``Trainer``):
        it sees ``self.accelerator`` when every subclass of the program sets it, the same way. Never in the base's
        ``__init__``: a subclass calls it (``super().__init__(...)``) before it sets its own attributes."""
        if method.name == "__init__" or method.parent is None:
            return None
        subclasses = self.facts.subclasses(method.parent)
        names = {self.edits.accelerators.get(cls) for cls in subclasses}
        return names.pop() if subclasses and len(names) == 1 and None not in names else None

    def after_accelerator(self, scope: Scope, stmt: cst.BaseStatement, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``stmt`` in ``scope`` runs after the accelerator exists.

        In the home scope, by position. A function nested in the home runs when it is called: it is
        after the accelerator when it is defined after it, or when every call of it is (a ``log``
        helper called before the accelerator exists keeps its plain ``print``). Other scopes that
        have the accelerator (helpers it is passed to, methods of a trainer) run after it exists."""
        if self.accelerator_in(scope) is None:
            return False
        if self.created is not None:
            home, anchor = self.created[0], (self.created[1], True)
        else:
            home, anchor = self.plan.home, self.plan.analysis(Creation).anchor
        if anchor is None or home is None:
            return True
        if scope is home:
            return self._after_creation(stmt, anchor)
        if home.class_scope is not None and scope.name == "__init__" and scope.class_scope is home.class_scope:
            # ``self.build_model()`` creates it, called from ``__init__``: only what runs after that call sees it
            calls = [s for s in self.plan.call_sites(home) if s.scope is scope]
            return bool(calls) and any(self.facts.after(stmt, s.stmt) for s in calls)
        nested = scope
        while nested.parent is not None and nested.parent is not home:
            nested = nested.parent
        if nested.parent is not home or nested.kind != "function" or id(nested) in seen or home.kind == "class":
            return True
        if self._after_creation(nested.node, anchor):  # type: ignore[arg-type]
            return True
        sites = self.plan.call_sites(nested)
        return bool(sites) and all(self.after_accelerator(s.scope, s.stmt, seen | {id(nested)}) for s in sites)

    def will_be_after_accelerator(self, scope: Scope, stmt: cst.BaseStatement) -> bool:
        """For a rule that runs before threading: whether ``stmt`` in ``scope`` will run after the accelerator
        exists and see it: ``after_accelerator`` where it is already; in a plain helper, when every call of it
        is after the accelerator in a scope that has it, with plain arguments (threading then passes it in, once
        an edit writes through it: ``replace_through``, ``regroup_through``)."""
        if self.accelerator_in(scope) is not None:
            return self.after_accelerator(scope, stmt)
        if scope.kind != "function" or scope.class_scope is not None:
            return False
        sites = self.plan.call_sites(scope)
        return bool(sites) and all(
            self.accelerator_in(s.scope) is not None and self.after_accelerator(s.scope, s.stmt)
            and not any(a.star for a in s.node.args) for s in sites
        )

    def _after_creation(self, stmt: cst.BaseStatement, anchor: tuple[cst.BaseStatement, bool]) -> bool:
        at, after = anchor
        order = self.facts.order
        if not (order[stmt][0] > order[at][1] if after else order[stmt][0] >= order[at][0]):
            return False
        return not self.other_branch(stmt, at)

    def other_branch(self, stmt: cst.BaseStatement, at: cst.BaseStatement) -> bool:
        """Whether ``stmt`` is in another branch of an ``if`` whose one branch holds ``at`` (the accelerator made in
        the ``if`` branch that trains: set P's P5 printed through it in the ``else`` branch, a NameError there)."""
        around = set(self.facts.chain(stmt)[1:])
        for outer in self.facts.chain(at)[1:]:
            if isinstance(outer, cst.If) and outer in around and isinstance(outer.body, cst.IndentedBlock):
                body = list(outer.body.body)
                if (self.facts.top_in(at, body) is None) != (self.facts.top_in(stmt, body) is None):
                    return True
        return False

    def found_accelerator(self, scope: Scope, name: str, stmt: cst.BaseStatement) -> None:
        """Converted code: ``stmt`` in ``scope`` creates the accelerator, read there as ``name``."""
        self.created = (scope, stmt)
        self.edits.bind(scope, name)

    def bind_accelerator(self, scope: Scope, name: str) -> None:
        """Declare, with the edit that makes it so, that ``scope`` reads the accelerator as ``name``."""
        self.edits.bind(scope, name)

    def readers(self) -> list[Scope]:
        """The scopes whose proposed edits write the accelerator (``replace_through``, ``regroup_through``)."""
        return list(self.edits.readers)  # type: ignore[arg-type]

    # what is already handled: read from the edits and warnings proposed so far ------------------------
    def rewritten(self, node: cst.CSTNode) -> bool:
        """Whether an edit already takes care of ``node`` (it is replaced, or nothing of it is left)."""
        return self.edits.rewritten(node)

    def dropped(self, node: cst.CSTNode) -> bool:
        """Whether nothing of ``node`` is left once the edits apply (``device`` in a removed ``x.to(device)``)."""
        return self.edits.dropped(node)

    def reported(self, node: cst.CSTNode) -> bool:
        """Whether a warning is already reported about ``node``."""
        return any(n is node for n, _ in self.warnings)

    # edits ------------------------------------------------------------------------------------
    def is_skipped(self, stmt: cst.BaseStatement) -> bool:
        """Whether ``stmt`` or a statement around it carries ``# accelify: skip``."""
        return any(s in self.facts.skipped for s in self.facts.chain(stmt))

    def replace(self, node: cst.CSTNode, stmt: cst.BaseStatement, fn: Replacement) -> bool:
        if self.is_skipped(stmt):
            return False
        self.edits.replace(node, stmt, fn)
        return True

    def replace_through(self, scope: Scope, node: cst.CSTNode, stmt: cst.BaseStatement, fn: Through) -> bool:
        """Replace ``node`` by ``fn(updated node, accelerator)``, ``accelerator`` being what ``scope`` calls it once
        every rule has run (a rule that runs before threading writes through the accelerator a helper gets later)."""
        if self.is_skipped(stmt):
            return False
        self.edits.replace(node, stmt, lambda n: fn(n, self.accelerator_in(scope) or "accelerator"), reader=scope)
        return True

    def regroup(self, stmts: Sequence[cst.BaseStatement], make: Regroup) -> None:
        self.edits.regroup(stmts, make)

    def regroup_through(
        self, scope: Scope, stmts: Sequence[cst.BaseStatement], make: Callable[[list[cst.BaseStatement], str], list[cst.BaseStatement]]
    ) -> None:
        """``regroup`` whose ``make`` also receives the accelerator's name in ``scope`` (as ``replace_through``)."""
        self.edits.regroup(stmts, lambda group: make(group, self.accelerator_in(scope) or "accelerator"), reader=scope)

    def insert_before(self, stmt: cst.BaseStatement, code: Sequence[str], *, ungrouped: bool = False) -> None:
        """Insert ``code`` before ``stmt``; ``ungrouped``: never inside a group (a guard) that starts at ``stmt``."""
        self.edits.insert_before(stmt, [statement(line) for line in code], ungrouped=ungrouped)

    def insert_after(self, stmt: cst.BaseStatement, code: Sequence[str], *, ungrouped: bool = False) -> None:
        """Insert ``code`` after ``stmt``; ``ungrouped``: never inside a group (a guard) that ends at ``stmt``."""
        self.edits.insert_after(stmt, [statement(line) for line in code], ungrouped=ungrouped)

    def add_import(self, module: cst.Module, new: cst.BaseStatement, *, first: bool = False) -> None:
        """``new`` (an import) after the import block at the top of ``module`` (after its docstring when it has no
        imports): the one place rules add imports; ``first``: ahead of the others rules add (the accelerator's own,
        whichever rule runs first)."""
        body = module.body
        anchor = None
        for stmt in body:
            if is_import(stmt):
                anchor = stmt
            elif anchor is not None or not is_docstring(stmt):
                break
        if anchor is not None:
            self.edits.insert_after(anchor, [new], first=first)
        elif body:
            self.edits.insert_before(body[1] if is_docstring(body[0]) and len(body) > 1 else body[0], [new], first=first)

    def remove(self, stmt: cst.BaseStatement) -> bool:
        if self.is_skipped(stmt):
            return False
        self.edits.remove(stmt)
        return True

    def import_state(self, unit: str) -> None:
        """``from <runtime> import PartialState`` after the top imports of the local module ``unit``, once (the
        script's own gets it beside ``Accelerator`` where its top level goes through it: ``EntryLevel.state_used``)."""
        facts = self.facts.units[unit]
        entry = self.plan.analysis(EntryLevel)
        home = self.plan.home
        if self.accelerating and home is not None and self.facts.unit_of(home) is facts and entry.state_used \
                and entry.home is not None and entry.home.unit == "__main__" and not self.notebook:
            return  # the imports rule writes ``from <runtime> import Accelerator, PartialState`` there
        if any(_imports_state(s, self.import_module) for s in facts.module.body) or any(
                _imports_state(new, self.import_module) and any(anchor is top for top in facts.module.body)
                for anchor, _, new in self.edits.inserted()):
            return
        new = cst.SimpleStatementLine([cst.ImportFrom(module=cst.parse_expression(self.import_module),  # type: ignore[arg-type]
                                                      names=[cst.ImportAlias(cst.Name("PartialState"))])])
        body = list(facts.module.body)
        last = max((i for i, stmt in enumerate(body) if is_import(stmt) and all(is_import(b) or is_docstring(b)
                                                                               for b in body[:i])), default=None)
        if home is not None and self.facts.unit_of(home) is facts and last is not None and last + 1 < len(body):
            # the module the imports rule adds ``Accelerator``'s import to (after its last import): this one goes
            # after it whichever rule runs first, before the first statement past the imports
            self.edits.insert_before(body[last + 1], [new])
        else:
            self.add_import(facts.module, new)

    def process_state(self, shared: bool = False) -> str | None:
        """How code the accelerator does not reach makes the runtime's process state: ``PartialState()`` where the
        accelerator surely exists already (``shared``: its state is the one read), else ``PartialState(<the
        accelerator's cpu>)`` (Hugging Face Accelerate keeps the device of the first state a process makes), or
        None where that ``cpu`` is an expression such code cannot read (``cpu=not args.cuda``)."""
        cpu = self.plan.analysis(Creation).cpu_argument
        if shared:
            return "PartialState()"
        return f"PartialState({cpu})" if cpu in LITERAL_CPU else None

    def change(self, description: str) -> None:
        if description not in self.changes:
            self.changes.append(description)

    # warnings ---------------------------------------------------------------------------------
    def warning(self, code: Code, node: cst.CSTNode, **fields: str) -> Located:
        """The warning ``code`` about ``node``, its message and fix filled from ``fields``."""
        return node, ConversionWarning(code.code, code.message.format(**fields), code.fix.format(**fields))

    def warn(self, code: Code, node: cst.CSTNode, **fields: str) -> None:
        if self._unreachable(node):
            return  # (set V's V6: a ``df.to_csv`` after a ``return``, a method whose ``def`` line went missing)
        located = self.warning(code, node, **fields)
        if all(n is not node or w.code != code.code for n, w in self.warnings):
            self.warnings.append(located)

    def _unreachable(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (a call or a statement) is in code no path reaches: nothing there runs to report on."""
        site = self.facts.sites.get(node) if isinstance(node, cst.Call) else None  # type: ignore[arg-type]
        stmt = site.stmt if site is not None else node if isinstance(node, cst.BaseStatement) else None
        return stmt is not None and stmt in self.facts.order and any(s in self.facts.dead for s in self.facts.chain(stmt))

    def abort(self, code: Code, node: cst.CSTNode, **fields: str) -> None:
        """Stop converting this file: it is refused (left unchanged, needing attention), with this warning."""
        raise Abort(self.warning(code, node, **fields))


def _imports_state(stmt: cst.CSTNode, module: str) -> bool:
    """``from <module> import PartialState`` (among other names)."""
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(small, cst.ImportFrom) and small.module is not None and dotted(small.module) == module
        and not isinstance(small.names, cst.ImportStar) and any(dotted(a.name) == "PartialState" for a in small.names)
        for small in stmt.body)
