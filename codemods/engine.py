"""Run the ordered rules over one parsed module: one analysis, one batched transform, one status."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis import collect
from accelify.codemods.context import Abort, Context, Located
from accelify.codemods.edits import apply
from accelify.codemods.facts import Facts
from accelify.codemods.outcome import ATTENTION, CONVERTED, NOT_A_CANDIDATE, SKIPPED, UNCHANGED, ConversionWarning
from accelify.codemods.plan import Plan
from accelify.codemods.positions import locate
from accelify.codemods.rules import RULES
from accelify.codemods.targets import DEFAULT_TARGET, TARGETS


@dataclass(frozen=True)
class Outcome:
    """What the rules did to a module. ``status`` is final: converted (the code changed), unchanged,
    attention (refused: see the warnings) or skipped (``reason`` says why)."""

    status: str
    module: cst.Module
    changes: tuple[str, ...]
    warnings: tuple[ConversionWarning, ...]
    reason: str | None = None


def _uses_accelerator(facts: Facts) -> bool:
    """Whether the module already uses an ``Accelerator`` (so a second run changes nothing)."""
    return facts.imports.imports_any(*TARGETS.values()) or any(
        (site.qualname or "").rsplit(".", 1)[-1] == "Accelerator" for site in facts.calls
    )


def transform(module: cst.Module, *, target: str = DEFAULT_TARGET, disabled: frozenset[str] = frozenset()) -> Outcome:
    """Convert ``module``; never raises for a pattern it does not understand (it warns or refuses instead)."""
    facts = collect(module)
    if _uses_accelerator(facts):
        return Outcome(UNCHANGED, module, (), (), "already uses an Accelerator")
    if not facts.imports.imports_any("torch"):
        return Outcome(SKIPPED, module, (), (), NOT_A_CANDIDATE)
    ctx = Context(facts, Plan(facts), target=target)
    try:
        for rule in RULES:
            if rule.name not in disabled:
                rule().run(ctx)
    except Abort as stop:
        warnings = _locate(module, [*ctx.warnings, *stop.warnings])
        return Outcome(ATTENTION, module, (), warnings, stop.warnings[0][1].message)
    if not ctx.accelerators:  # no builder (nothing trains here): any edit would be a half conversion
        return Outcome(UNCHANGED, module, (), _locate(module, ctx.warnings))
    new = apply(module, ctx.edits)
    if not ctx.edits or new.code == module.code:
        return Outcome(UNCHANGED, module, (), _locate(module, ctx.warnings))
    return Outcome(CONVERTED, new, tuple(ctx.changes), _locate(module, ctx.warnings))


def _locate(module: cst.Module, warnings: list[Located]) -> tuple[ConversionWarning, ...]:
    where = locate(module, [node for node, _ in warnings])
    out = [warning.at(*where.get(node, (1, 1))) for node, warning in warnings]
    return tuple(sorted(out, key=lambda w: (w.line, w.col, w.code)))
