"""The engine's notebook step: a notebook's training call goes through ``notebook_launcher``.

``transform(..., notebook=True)`` runs it on the whole converted program of a notebook (its code cells joined, as
``accelify/notebook.py`` builds it), after the rules: a top-level call of a function that creates the ``Accelerator`` (or calls one that does),
``main(a, b)``, becomes ``notebook_launcher(main, (a, b))``, which on one process calls it here exactly as before
and on a machine with N GPUs runs it on each. Where the training runs in the cells themselves (``ACC101``) or
the call cannot be launched as it is (keyword arguments, a used result: ``ACC102``), it notes why instead.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import MetadataWrapper, PositionProvider

from accelify.codemods import codes
from accelify.codemods.codes import Code
from accelify.codemods.engine.targets import import_module


class _Launch(cst.CSTTransformer):
    """Turn a top-level ``main(a, b)`` that trains into ``notebook_launcher(main, (a, b))``."""

    def __init__(self, trains: set[str]) -> None:
        self.trains = trains
        self.launched: list[str] = []
        self.depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_Expr(self, original: cst.Expr, updated: cst.Expr) -> cst.Expr:
        call = updated.value
        if not (m.matches(call, m.Call(func=m.Name())) and call.func.value in self.trains):  # type: ignore[union-attr]
            return updated
        assert isinstance(call, cst.Call)
        if any(arg.keyword is not None or arg.star for arg in call.args):
            return updated
        name = call.func.value  # type: ignore[union-attr]
        elements = [cst.Element(arg.value) for arg in call.args]
        args = cst.Tuple(elements) if elements else cst.Tuple([])
        if len(elements) == 1:
            args = cst.Tuple([cst.Element(elements[0].value, comma=cst.Comma())])
        self.launched.append(name)
        launch = cst.Call(cst.Name("notebook_launcher"), [cst.Arg(cst.Name(name)), cst.Arg(args)])
        return updated.with_changes(value=launch)


def _creates_accelerator(node: cst.CSTNode) -> bool:
    return bool(m.findall(node, m.Call(func=m.Name("Accelerator") | m.Attribute(attr=m.Name("Accelerator")))))


def _calls(node: cst.CSTNode) -> set[str]:
    return {c.func.value for c in m.findall(node, m.Call(func=m.Name()))}  # type: ignore[union-attr]


def launch(module: cst.Module, target: str) -> tuple[cst.Module, list[tuple[Code, dict[str, str], int, int]]]:
    """The converted program with its training call going through ``notebook_launcher``, and the
    notes (code, fields, line, column in ``module``'s code) where that cannot be done."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    functions = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    trains = {name for name, f in functions.items() if _creates_accelerator(f)}
    changed = True
    while changed:  # functions that call one that trains train too (``main`` calling ``train``)
        grown = {name for name, f in functions.items() if _calls(f) & trains}
        changed = not grown <= trains
        trains |= grown
    notes: list[tuple[Code, dict[str, str], int, int]] = []

    def at(node: cst.CSTNode) -> tuple[int, int]:
        where = positions[node].start
        return where.line, where.column + 1

    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        if _creates_accelerator(statement):
            notes.append((codes.NOTEBOOK_IN_PROCESS, {}, *at(statement)))
            continue
        for call in m.findall(statement, m.Call(func=m.Name())):
            name = call.func.value  # type: ignore[union-attr]
            if name not in trains:
                continue
            launchable = m.findall(statement, m.Expr(value=m.Call(func=m.Name(name)))) and not any(
                arg.keyword is not None or arg.star for arg in call.args  # type: ignore[attr-defined]
            )
            if not launchable:
                why = ("it passes keyword arguments" if any(a.keyword is not None or a.star for a in call.args)  # type: ignore[attr-defined]
                       else "its result is used, and notebook_launcher returns one result per process")
                notes.append((codes.NOTEBOOK_LAUNCH_BY_HAND, {"name": name, "why": why}, *at(call)))
    transformer = _Launch(trains)
    new = module.visit(transformer) if trains else module
    if transformer.launched:
        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, import_module(target), "notebook_launcher")
        new = AddImportsVisitor(context).transform_module(new)
    elif not notes:  # an Accelerator created elsewhere (a class, a function no cell calls)
        first = next(iter(m.findall(wrapper.module, m.Call(func=m.Name("Accelerator")))), None)
        if first is not None:
            notes.append((codes.NOTEBOOK_IN_PROCESS, {}, *at(first)))
    return new, notes
