"""Several trainers chosen by a flag, each converted on its own, and the conversions put together.

When the plan finds several trainers each building a whole training (ACC039) and a run of the program builds at most
one of them (``analysis/trainer_choice.py``), the rules run once per trainer, on a plan that leaves the other
trainers' classes aside: each conversion prepares its trainer's objects and makes its accelerator in its trainer (one
``Accelerator`` per process, since one branch runs). The program is then each trainer's class (or function) as its
own conversion changed it, and everything else as every conversion left it: a module outside the trainers that two
conversions would change differently cannot be put together, and the program stays refused (ACC039). A trainer that
is refused on its own (WGAN-GP's penalty backwarded alone: ACC041) refuses the program with its warnings: written
without it, choosing it by the flag would run the unconverted trainer on every process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import libcst as cst

from accelify.codemods.analysis.facts import Facts
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.trainer_choice import Trainer, View, choice, views
from accelify.codemods.engine.unreached import reached
from accelify.codemods.engine.context import Abort, Context, Located
from accelify.codemods.engine.edits import apply
from accelify.codemods.engine.outcome import ConversionWarning
from accelify.codemods.engine.positions import locate

Locate = Callable[[Facts, list[Located]], dict[str, tuple[ConversionWarning, ...]]]


@dataclass(frozen=True)
class Converted:
    """What the conversions of the trainers make of the program, put together."""

    modules: dict[str, cst.Module]  # every module of the program, by unit (unchanged ones as they were)
    changes: tuple[str, ...]
    warnings: dict[str, tuple[ConversionWarning, ...]]


@dataclass(frozen=True)
class Refused:
    """Trainers refused on their own: their names, the first warning that stops one, the warnings that stop them and
    those of their conversions, by unit; and the trainers that convert."""

    trainers: tuple[str, ...]
    reason: str
    warnings: dict[str, tuple[ConversionWarning, ...]]
    converted: tuple[str, ...]


@dataclass(frozen=True)
class Unmerged:
    """A run builds one of the trainers, but their conversions cannot be put together: why (ACC039's ``why``)."""

    why: str


def convert_each(program: Facts, plan: Plan, run: Callable[[Context], None], locate_all: Locate,
                 target: str) -> Converted | Refused | Unmerged | None:
    """The program with each of the trainers ``plan`` found (``plan.trainers``) converted on its own, or the trainers
    refused on their own; ``Unmerged`` when a run builds one of them but their conversions cannot be put together;
    None when a run may build several (the program stays ACC039 as the plan reported it)."""
    trainers = choice(plan, plan.trainers) if plan.trainers else None
    if trainers is None or isinstance(trainers, str):
        return Unmerged(trainers) if trainers is not None else None
    spans = _spans(program, trainers)
    done: list[tuple[View, dict[str, cst.Module], list[str], dict[str, tuple[ConversionWarning, ...]]]] = []
    refused: list[tuple[View, str, dict[str, tuple[ConversionWarning, ...]]]] = []
    for view in views(trainers):
        ctx = Context(program, Plan(program, view), target=target)
        try:
            run(ctx)
        except Abort as stop:
            found = _kept(locate_all(program, [*ctx.warnings, *stop.warnings]), view, spans)
            refused.append((view, stop.warnings[0][1].message, found))
            continue
        if not ctx.accelerating:  # choosing it would train unconverted on every process
            return Unmerged(f"and converted on its own, `{view.trainer.name}` would not change at all")
        # applied now: the next trainer's plan gives the bindings its own roles
        modules = {unit: apply(facts.module, ctx.edits) for unit, facts in program.units.items()}
        done.append((view, modules, list(ctx.changes), _kept(locate_all(program, reached(ctx.plan, ctx.warnings)), view, spans)))
    if refused:
        return Refused(tuple(v.trainer.name for v, _, _ in refused), refused[0][1], _joined(f for *_, f in refused),
                       tuple(v.trainer.name for v, *_ in done))
    merged: dict[str, cst.Module] = {}
    for unit, facts in program.units.items():
        module = _merge(facts.module, [t for t in trainers if t.territory.unit == unit],
                        [(view.trainer, modules[unit]) for view, modules, _, _ in done])
        if module is None:
            where = "the script" if unit == "__main__" else f"`{unit}`"
            return Unmerged(f"and converted one at a time (a run builds one of them), they would change {where}, "
                            "which they share, each in its own way")
        merged[unit] = module
    changes = tuple(dict.fromkeys(c for _, _, found, _ in done for c in found))
    return Converted(merged, changes, _joined(found for *_, found in done))


def _joined(each: Iterable[dict[str, tuple[ConversionWarning, ...]]]) -> dict[str, tuple[ConversionWarning, ...]]:
    """Several conversions' warnings, by unit, each once, in order of position."""
    out: dict[str, dict[ConversionWarning, None]] = {}
    for found in each:
        for unit, warnings in found.items():
            out.setdefault(unit, {}).update(dict.fromkeys(warnings))
    return {unit: tuple(sorted(w, key=lambda w: (w.line, w.col, w.code))) for unit, w in out.items()}


def _spans(program: Facts, trainers: list[Trainer]) -> dict[int, tuple[str, int, float]]:
    """Each trainer's lines: (unit, first line, the next top-level statement's first line or infinity)."""
    out: dict[int, tuple[str, int, float]] = {}
    for trainer in trainers:
        module = program.units[trainer.territory.unit].module
        body = list(module.body)
        node = trainer.territory.node
        index = next(i for i, stmt in enumerate(body) if stmt is node)
        after = body[index + 1] if index + 1 < len(body) else None
        where = locate(module, [node, *([after] if after is not None else [])])
        out[id(trainer)] = (trainer.territory.unit, where[node][0], where[after][0] if after is not None else float("inf"))
    return out


def _kept(found: dict[str, tuple[ConversionWarning, ...]], view: View,
          spans: dict[int, tuple[str, int, float]]) -> dict[str, tuple[ConversionWarning, ...]]:
    """The warnings of ``view``'s conversion that are about its trainer or about no trainer (the others' are their
    own conversions' to make)."""
    def other(unit: str, line: int) -> bool:
        return any(spans[id(t)][0] == unit and spans[id(t)][1] <= line < spans[id(t)][2] for t in view.others)

    return {unit: tuple(w for w in warnings if not other(unit, w.line)) for unit, warnings in found.items()}


def _merge(original: cst.Module, owners: list[Trainer],
           results: list[tuple[Trainer, cst.Module]]) -> cst.Module | None:
    """One module of the program put together: each trainer defined in it as its own conversion made it, the rest as
    the conversions of the trainers defined here made it, provided they agree and the other conversions left it as it
    was (or made it the same). None when they differ."""
    names = {t.name for t in owners}
    if any(sum(1 for s in original.body if _defines(s) == name) != 1 for name in names):
        return None
    kept = {id(s) for s in original.body}

    def shape(module: cst.Module) -> tuple[object, ...] | None:
        """The module with its trainers left out: statements the edits did not touch by identity, others by code
        (generating a whole module per conversion cost seconds for ten trainers)."""
        if any(sum(1 for s in module.body if _defines(s) == name) != 1 for name in names):
            return None
        frame = cst.Module(body=[], header=module.header, footer=module.footer).code
        return (frame, *(("trainer", _defines(s)) if _defines(s) in names else id(s) if id(s) in kept
                         else module.code_for_node(s) for s in module.body))

    own = [(t, m) for t, m in results if t in owners]
    if not own:
        first = shape(results[0][1])
        return results[0][1] if all(shape(m) == first for _, m in results) else None
    base = own[0][1]
    agreed = shape(base)
    if agreed is None or any(shape(m) != agreed for _, m in own):
        return None
    untouched = shape(original)
    if any(shape(m) not in (agreed, untouched) for t, m in results if t not in owners):
        return None
    made = {t.name: next(s for s in m.body if _defines(s) == t.name) for t, m in own}
    return base.with_changes(body=[made.get(_defines(s) or "", s) for s in base.body])


def _defines(stmt: cst.BaseStatement) -> str | None:
    """The name a top-level ``class`` or ``def`` statement defines."""
    return stmt.name.value if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) else None
