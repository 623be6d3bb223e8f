"""Run the ordered rules over one program (a script and the local modules it uses): one analysis per
module, one plan, one batched transform per module, one status.

The steps, in order: ``collect`` (facts, per module) -> ``Plan`` -> the rules (``rules.RULES``, each proposing
edits and warnings on one ``Context``) -> ``apply`` (one pass per module) -> for a notebook's program, the
notebook step (``notebook_launch.launch``: its training call through ``notebook_launcher``) -> ``Outcome``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import libcst as cst

from accelify.codemods.analysis.collect import collect
from accelify.codemods.analysis.exports import star_exports
from accelify.codemods.analysis.problems import SEVERAL_TRAINERS as SEVERAL
from accelify.codemods.codes import SEVERAL_TRAINERS
from accelify.codemods.engine.alternatives import Converted, Refused, Unmerged, convert_each
from accelify.codemods.rules.refusals import CODES
from accelify.codemods.engine.context import Abort, Context, Located
from accelify.codemods.engine.edits import apply
from accelify.codemods.engine.notebook_launch import launch
from accelify.codemods.analysis.facts import Facts
from accelify.codemods.engine.outcome import ALREADY_CONVERTED, ATTENTION, CONVERTED, NOT_A_CANDIDATE, SKIPPED, UNCHANGED, ConversionWarning
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.engine.positions import locate
from accelify.codemods.rules import RULES
from accelify.codemods.engine.targets import DEFAULT_TARGET, TARGETS
from accelify.codemods.engine.unreached import reached


@dataclass(frozen=True)
class Companion:
    """A local module the conversion of the script edits too (a helper that gains the accelerator)."""

    unit: str
    module: cst.Module
    warnings: tuple[ConversionWarning, ...]
    code: str | None = None  # the module's text, when it changed


@dataclass(frozen=True)
class Outcome:
    """What the rules did to a script. ``status`` is final: converted (the code changed), unchanged,
    attention (refused: see the warnings) or skipped (``reason`` says why). ``companions`` are the
    local modules whose code changed with it (converted together, written together)."""

    status: str
    module: cst.Module
    changes: tuple[str, ...]
    warnings: tuple[ConversionWarning, ...]
    reason: str | None = None
    companions: tuple[Companion, ...] = ()
    code: str | None = None  # the converted text, for a converted outcome (``module.code``, generated once)
    notes: tuple[ConversionWarning, ...] = ()  # the notebook step's warnings, positioned in ``code``


def _uses_accelerator(facts: Facts) -> bool:
    """Whether the module already uses an ``Accelerator`` (so a second run changes nothing)."""
    return facts.imports.imports_any(*TARGETS.values()) or any(
        (site.qualname or "").rsplit(".", 1)[-1] == "Accelerator" for site in facts.calls
    )


def transform(
    module: cst.Module,
    *,
    target: str = DEFAULT_TARGET,
    disabled: frozenset[str] = frozenset(),
    modules: Mapping[str, cst.Module] | None = None,
    sources: Mapping[str, str] | None = None,
    notebook: bool = False,
    packages: Mapping[str, str | None] | None = None,
) -> Outcome:
    """Convert the script ``module``; ``modules`` are the local modules it imports, by import name
    (``{"loops": ...}``), analysed with it; ``sources`` their texts and the script's (``"__main__"``) where the
    caller has them (generating code is a large part of the cost); ``packages`` the package each local module's
    relative imports start from; ``notebook``: ``module`` is a notebook's
    code cells joined, and its training call goes through ``notebook_launcher`` (the notebook step). Never
    raises for a pattern it does not understand (it warns or refuses instead)."""
    locals_ = {unit: m for unit, m in (modules or {}).items() if unit != "__main__"}
    exports = star_exports({"__main__": module, **locals_}, packages or {}) if locals_ else {}
    facts = collect(module, package=(packages or {}).get("__main__"), exports=exports)
    if _uses_accelerator(facts):
        return Outcome(UNCHANGED, module, (), _recheck(facts, target, disabled), ALREADY_CONVERTED)
    others = [collect(m, unit, (packages or {}).get(unit), exports) for unit, m in locals_.items()]
    if not any(f.imports.imports_any("torch") for f in (facts, *others)):
        # an entry that imports torch only through its own modules (``from models.gan import GAN``) is a program
        return Outcome(SKIPPED, module, (), (), NOT_A_CANDIDATE)
    others = [f for f in others if not _uses_accelerator(f)]  # an already converted helper is left as it is
    program = Facts.program(facts, others) if others else facts
    plan = Plan(program)
    ctx = Context(program, plan, target=target, notebook=notebook)

    def run(ctx: Context) -> None:
        for rule in RULES:
            if rule.name not in disabled:
                rule().run(ctx)

    try:
        run(ctx)
    except Abort as stop:
        each = convert_each(program, plan, run, _locate, target) if plan.trainers and not notebook else None
        refused = stop.warnings
        if isinstance(each, Unmerged):  # a run builds one trainer, but they cannot be converted one at a time
            refused = tuple(ctx.warning(SEVERAL_TRAINERS, p.node, **(dict(p.fields) | {"why": each.why}))
                            if p.kind == SEVERAL else ctx.warning(CODES[p.kind], p.node, **dict(p.fields))
                            for p in plan.problems if p.refuse)
        elif each is not None:
            return _each(module, program, each, sources or {})
        warnings = _locate(program, [*ctx.warnings, *refused])
        return Outcome(ATTENTION, module, (), warnings["__main__"], refused[0][1].message, _noted(program, warnings))
    warnings = _locate(program, reached(plan, ctx.warnings))
    if not ctx.accelerating:  # nothing trains here: any edit would be a half conversion
        return Outcome(UNCHANGED, module, (), warnings["__main__"], None, _noted(program, warnings))
    texts = dict(sources or {})

    def text(unit: str) -> str:
        if unit not in texts:
            texts[unit] = program.units[unit].module.code
        return texts[unit]

    new = apply(module, ctx.edits)
    new_code = new.code
    companions = []
    for unit, unit_facts in program.units.items():
        if unit == "__main__":
            continue
        edited = apply(unit_facts.module, ctx.edits)
        edited_code = edited.code
        if edited_code != text(unit) or warnings.get(unit):
            companions.append(Companion(unit, edited, warnings.get(unit, ()), edited_code))
    if new_code == text("__main__") and not any(c.code != text(c.unit) for c in companions):
        return Outcome(UNCHANGED, module, (), warnings["__main__"], None, tuple(companions))
    notes: tuple[ConversionWarning, ...] = ()
    if notebook and new_code != text("__main__"):
        new, found = launch(new, target)
        new_code = new.code
        notes = tuple(ConversionWarning(code.code, code.message.format(**fields), code.fix.format(**fields), line, col)
                      for code, fields, line, col in found)
    return Outcome(CONVERTED, new, tuple(ctx.changes), warnings["__main__"], None, tuple(companions), new_code, notes)


def _each(module: cst.Module, program: Facts, each: Converted | Refused, sources: Mapping[str, str]) -> Outcome:
    """The outcome of converting each of several trainers chosen by a flag on its own (``alternatives.py``)."""
    if isinstance(each, Refused):
        warnings = each.warnings
        names = ", ".join(f"`{name}`" for name in each.trainers)
        others = ", ".join(f"`{name}`" for name in each.converted)
        reason = f"{each.reason} (in {names}, of the trainers the program chooses between by a flag" + (
            f"; {others} convert on their own: nothing is written until every trainer converts)" if others else ")")
        return Outcome(ATTENTION, module, (), warnings.get("__main__", ()), reason, _noted(program, warnings))
    texts = dict(sources)
    companions = []
    for unit, new in each.modules.items():
        if unit == "__main__":
            continue
        code = new.code
        if code != texts.get(unit, program.units[unit].module.code) or each.warnings.get(unit):
            companions.append(Companion(unit, new, each.warnings.get(unit, ()), code))
    main = each.modules["__main__"]
    code = main.code
    if code == texts.get("__main__", module.code) and not any(c.code != program.units[c.unit].module.code for c in companions):
        return Outcome(UNCHANGED, module, (), each.warnings.get("__main__", ()), None, tuple(companions))
    return Outcome(CONVERTED, main, each.changes, each.warnings.get("__main__", ()), None, tuple(companions), code)


def _recheck(facts: Facts, target: str, disabled: frozenset[str]) -> tuple[ConversionWarning, ...]:
    """A second look at converted code: the problems the rules leave to the user that are still there (each
    rule's ``recheck``), so checking a converted file again reports them until they are fixed."""
    ctx = Context(facts, Plan(facts), target=target)
    _find_accelerator(ctx)
    if ctx.created is None:
        return ()
    try:
        for rule in RULES:
            if rule.name not in disabled:
                rule().recheck(ctx)
    except Abort:  # pragma: no cover - a recheck only warns
        pass
    return _locate(facts, ctx.warnings)["__main__"]


def _find_accelerator(ctx: Context) -> None:
    """Where the code creates its accelerator (``accelerator = Accelerator(...)``, ``self.accelerator = ...``),
    and the helpers and classes it is passed to (a parameter, ``self.accelerator = accelerator``)."""
    name = None
    for binding in ctx.facts.bindings():
        value = binding.value
        if isinstance(value, cst.Call) and (binding.where.imports.qualname(value.func) or "").rsplit(".", 1)[-1] == "Accelerator":
            name = binding.key.rsplit(".", 1)[-1]
            ctx.found_accelerator(binding.scope, binding.key, binding.stmt)
            if binding.scope is not binding.where:
                ctx.created = (binding.where, binding.stmt)
            break
    if name is None:
        return
    for scope in ctx.facts.scopes:
        if scope.kind == "function" and name in scope.param_names and ctx.created is not None and scope is not ctx.created[0]:
            ctx.bind_accelerator(scope, name)
    for binding in ctx.facts.bindings():
        if binding.key == f"self.{name}" and isinstance(binding.value, cst.Name) and binding.value.value == name:
            ctx.bind_accelerator(binding.scope, binding.key)


def _noted(program: Facts, warnings: dict[str, tuple[ConversionWarning, ...]]) -> tuple[Companion, ...]:
    """Local modules left unchanged but with warnings of their own."""
    return tuple(
        Companion(unit, program.units[unit].module, found) for unit, found in warnings.items() if unit != "__main__" and found
    )


def _locate(program: Facts, warnings: list[Located]) -> dict[str, tuple[ConversionWarning, ...]]:
    """Each module's warnings, with line and column, in order (one position pass per module)."""
    by_unit: dict[str, list[Located]] = {unit: [] for unit in program.units}
    owner = {}
    for unit, facts in program.units.items():
        for stmt in facts.order:
            owner[stmt] = unit
    for node, warning in warnings:
        by_unit[_unit_of(program, node, owner)].append((node, warning))
    out: dict[str, tuple[ConversionWarning, ...]] = {}
    for unit, located in by_unit.items():
        where = locate(program.units[unit].module, [node for node, _ in located])
        found = [warning.at(*where.get(node, (1, 1))) for node, warning in located]
        out[unit] = tuple(sorted(found, key=lambda w: (w.line, w.col, w.code)))
    return out


def _unit_of(program: Facts, node: cst.CSTNode, owner: dict[cst.BaseStatement, str]) -> str:
    if len(program.units) == 1:
        return "__main__"
    if node in owner:
        return owner[node]  # type: ignore[index]
    site = program.sites.get(node)  # type: ignore[arg-type]
    if site is not None:
        return site.scope.unit
    for unit, facts in program.units.items():  # an expression: find the module that holds it (rare: a few warnings)
        if locate(facts.module, [node]):
            return unit
    return "__main__"
