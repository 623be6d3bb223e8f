"""Run the ordered rules over one parsed module: one analysis, one batched transform."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.rules import RULES
from accelify.codemods.analysis import collect
from accelify.codemods.context import Abort, Context, Finding
from accelify.codemods.edits import apply
from accelify.codemods.plan import Plan
from accelify.codemods.positions import locate

ACCELERATOR_MODULES = ("accelify.runtime", "accelerate")


@dataclass(frozen=True)
class Diagnostic:
    """A located warning: ``line:col: code message (fix)``."""

    line: int
    col: int
    code: str
    message: str
    fix: str


@dataclass(frozen=True)
class Outcome:
    """What the rules did to a module: ``status`` is converted / unchanged / skipped."""

    status: str
    module: cst.Module
    changes: tuple[str, ...]
    diagnostics: tuple[Diagnostic, ...]
    reason: str | None = None


def transform(module: cst.Module, *, target: str = "accelify", disabled: frozenset[str] = frozenset()) -> Outcome:
    """Convert ``module``; never raises for a pattern it does not understand (it warns instead)."""
    facts = collect(module)
    if facts.imports.imports_any(*ACCELERATOR_MODULES) or any(
        (site.qualname or "").rsplit(".", 1)[-1] == "Accelerator" for site in facts.calls
    ):
        return Outcome("unchanged", module, (), (), "already uses an Accelerator")
    if not facts.imports.imports_any("torch"):
        return Outcome("skipped", module, (), (), "does not import torch")
    ctx = Context(facts, Plan(facts), target=target)
    try:
        for rule in RULES:
            if rule.name not in disabled:
                rule().run(ctx)
    except Abort as stop:
        return Outcome("unchanged", module, (), _locate(module, [*ctx.findings, *stop.findings]), stop.finding.message)
    if not ctx.accelerators:  # no builder (nothing trains here): any edit would be a half conversion
        return Outcome("unchanged", module, (), _locate(module, ctx.findings))
    new = apply(module, ctx.edits)
    status = "converted" if ctx.edits else "unchanged"
    return Outcome(status, new, tuple(ctx.changes) if ctx.edits else (), _locate(module, ctx.findings))


def _locate(module: cst.Module, findings: list[Finding]) -> tuple[Diagnostic, ...]:
    where = locate(module, [f.node for f in findings])
    out = [Diagnostic(*where.get(f.node, (1, 1)), f.code, f.message, f.fix) for f in findings]
    return tuple(sorted(out, key=lambda d: (d.line, d.col, d.code)))
