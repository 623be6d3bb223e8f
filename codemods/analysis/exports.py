"""What ``from module import *`` binds when ``module`` is a local module of the program.

``from utils import *`` in a script makes ``get_data`` (defined in ``utils.py``) a name of the script, exactly as
``from utils import get_data`` would. The collector resolves names through its module's import statements
(``ImportMap``), so a star import of a local module is resolved into those same aliases: every name the module
exports, with its qualified name (``utils.get_data``, or ``torch.nn`` for a ``nn`` that ``utils`` imported).

What a module exports follows Python: the strings of a module-level ``__all__`` list or tuple when there is one,
else every public name bound at module level (functions, classes, assignments, imports; not ``_private``). A star
import inside the exported module is followed too (``utils`` doing ``from helpers import *``).
"""

from __future__ import annotations

from typing import Mapping

import libcst as cst

from accelify.codemods.analysis.names import ImportMap
from accelify.codemods.analysis.statement_shapes import target_names

# a star-imported local module's exports: local name -> qualified name
Exports = Mapping[str, Mapping[str, str]]


def star_exports(modules: Mapping[str, cst.Module], packages: Mapping[str, str | None]) -> dict[str, dict[str, str]]:
    """For each local module that some module of the program star-imports: the names it exports, qualified.
    ``packages``: the package each module's relative imports start from."""
    wanted = {base for unit, module in modules.items() for base in _source_modules(module, packages.get(unit))}
    found: dict[str, dict[str, str]] = {}
    for unit in sorted(wanted):
        _exports(unit, modules, packages, found, set())
    return {unit: names for unit, names in found.items() if unit in wanted}


def _source_modules(module: cst.Module, package: str | None) -> list[str]:
    """The absolute modules ``module``'s top-level ``from X import *`` statements name."""
    imports = ImportMap()
    imports.package = package
    out = []
    for stmt in _top_statements(module.body):
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                base = imports.source_module(small)
                if base:
                    out.append(base)
    return out


def _exports(unit: str, modules: Mapping[str, cst.Module], packages: Mapping[str, str | None],
             found: dict[str, dict[str, str]], visiting: set[str]) -> dict[str, str]:
    if unit in found:
        return found[unit]
    module = modules.get(unit)
    if module is None or unit in visiting:
        return {}
    visiting.add(unit)
    imports = ImportMap()
    imports.package = packages.get(unit)
    names: dict[str, str] = {}
    listed: list[str] | None = None
    for stmt in _top_statements(module.body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            names[stmt.name.value] = f"{unit}.{stmt.name.value}"
            continue
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                base = imports.source_module(small)
                if base:
                    names.update(_exports(base, modules, packages, found, visiting))
            elif isinstance(small, (cst.Import, cst.ImportFrom)):
                for local in imports.add(small):
                    names[local] = imports.aliases.get(local, local)
            elif isinstance(small, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                for target in targets:
                    for name in target_names(target):
                        names[name] = f"{unit}.{name}"
                    if isinstance(target, cst.Name) and target.value == "__all__":
                        listed = _strings(small.value)
    visiting.discard(unit)
    if listed is not None:
        exported = {name: names.get(name, f"{unit}.{name}") for name in listed}
    else:
        exported = {name: full for name, full in names.items() if not name.startswith("_")}
    found[unit] = exported
    return exported


def _top_statements(body: "tuple[cst.BaseStatement, ...] | list[cst.BaseStatement]") -> list[cst.BaseStatement]:
    """The statements that run at import time, with those in top-level ``if``/``try`` blocks (``try: import x``)."""
    out: list[cst.BaseStatement] = []
    for stmt in body:
        if isinstance(stmt, (cst.If, cst.Try)):
            blocks = [stmt.body]
            if isinstance(stmt, cst.If) and isinstance(stmt.orelse, cst.Else):
                blocks.append(stmt.orelse.body)
            if isinstance(stmt, cst.Try):
                blocks += [handler.body for handler in stmt.handlers]
            for block in blocks:
                if isinstance(block, cst.IndentedBlock):
                    out += _top_statements(block.body)
        else:
            out.append(stmt)
    return out




def _strings(value: cst.BaseExpression | None) -> list[str] | None:
    """The names of ``__all__ = ["a", "b"]`` (None when it is not a plain list or tuple of strings)."""
    if not isinstance(value, (cst.List, cst.Tuple)):
        return None
    out = []
    for element in value.elements:
        if not isinstance(element.value, cst.SimpleString):
            return None
        out.append(element.value.evaluated_value if isinstance(element.value.evaluated_value, str) else "")
    return [name for name in out if name]
