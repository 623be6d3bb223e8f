"""The conversion pipeline: source text in, a frozen ``Result`` out. It never prints or exits.

``read -> parse once -> one analysis -> ordered rules -> one transform -> re-parse check -> Result``.
A notebook goes the same way as one program (``accelify.notebook.Notebook`` joins its code cells and cuts the
converted program back; the engine's notebook step puts its training call through ``notebook_launcher``).
The idempotence check is structural: a converted file creates an ``Accelerator``, and a file that
creates one is left unchanged, so converting the output again changes nothing.
"""

from __future__ import annotations

import ast
import os
import re
import traceback
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

import libcst as cst

from accelify.codemods.codes import NOTHING_TO_PREPARE
from accelify.codemods.engine.outcome import ALREADY_CONVERTED, ATTENTION, CONVERTED, FAILED, NOT_A_CANDIDATE, SKIPPED, UNCHANGED, ConversionWarning
from accelify.codemods.engine.targets import DEFAULT_TARGET, TARGETS
from accelify.errors import OutputCheckError, SourceError, TooLargeError, UnknownTargetError
from accelify.notebook import Notebook, read_notebook
from accelify.program import ModuleText, entry_package, local_modules, may_import_local, package_of
from accelify.results import Result
from accelify.source import read_source

if TYPE_CHECKING:
    from accelify.codemods.engine.transform import Outcome

_CALLER_SIGNS = {"ACC012", "ACC021", "ACC022"}  # a module alone: no optimizer, data it cannot follow, no loader
_SKIP_FILE = re.compile(r"^\s*#\s*accelify:\s*skip-file\b", re.MULTILINE)
_IMPORTS_LOCAL = re.compile(r"^\s*(?:import|from)\s+(?!torch\b|\.)", re.MULTILINE)  # worth looking for local modules


def convert_source(
    code: str,
    *,
    path: str = "<string>",
    target: str = DEFAULT_TARGET,
    disabled: frozenset[str] | set[str] = frozenset(),
    encoding: str = "utf-8",
    modules: Sequence[ModuleText] | None = None,
) -> Result:
    """Convert the source text of one script; ``modules`` are the local modules it imports (their
    conversions, when they change, are the result's ``companions``); None looks for them beside
    ``path`` (no module when the source has no file).

    >>> convert_source("x = 1\\n").status
    'skipped'
    """
    return _convert(code, path=path, target=target, disabled=disabled, encoding=encoding, modules=modules)[0]


def _convert(
    code: str,
    *,
    path: str,
    target: str,
    disabled: frozenset[str] | set[str],
    encoding: str,
    modules: Sequence[ModuleText] | None,
    notebook: bool = False,
) -> tuple[Result, tuple[ConversionWarning, ...]]:
    """``convert_source``, and the notebook step's warnings (positioned in the converted code) for a notebook."""
    if target not in TARGETS:
        raise UnknownTargetError(target)
    if _SKIP_FILE.search(code):
        return Result(path, SKIPPED, code, code, reason="# accelify: skip-file", encoding=encoding), ()
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as error:
        line, col, message = _syntax_error(code, error)
        return Result(path, FAILED, code, code, error=f"{path}:{line}:{col}: {message}", encoding=encoding), ()
    from accelify.codemods.engine.transform import transform  # the rules load only when something is converted

    if modules is None:
        looks = os.path.isfile(path) and (  # a file of a package looks from the package's root
            (_IMPORTS_LOCAL.search(code) and may_import_local(code, path)) or entry_package(path) is not None)
        modules = local_modules(path, module) if looks else []
    try:
        parsed = _parse_modules(modules)
        sources = {"__main__": code, **{local.unit: local.text for local in modules}}
        packages = {local.unit: package_of(local.unit, local.path) for local in modules}
        if os.path.isfile(path) and not notebook:
            packages["__main__"] = entry_package(path)  # ``engine/loops.py`` alone: ``from .steps import step``
        outcome = transform(module, target=target, disabled=frozenset(disabled), modules=parsed, sources=sources,
                            notebook=notebook, packages=packages)
        new = (outcome.code if outcome.code is not None else outcome.module.code) if outcome.status == CONVERTED else code
        if outcome.status == CONVERTED:
            # the accelerator may be created in a local module the conversion changed (a trainer class's ``run()``
            # in a package): converting the script again then finds nothing left to do there either
            elsewhere = any("Accelerator(" in (c.code or "") for c in outcome.companions)
            _check_output(new, path, entry=not elsewhere)
        companions = _companions(outcome, modules)
    except Exception as error:  # a bug in a rule must not take the other files down
        detail = "".join(traceback.format_exception(error))
        message = f"{path}: internal error while converting: {type(error).__name__}: {error}"
        return Result(path, FAILED, code, code, error=message, detail=detail, encoding=encoding), ()
    return Result(
        path,
        outcome.status,
        code,
        new,
        changes=outcome.changes,
        warnings=tuple(w.in_file(path) for w in outcome.warnings),
        reason=outcome.reason,
        encoding=encoding,
        companions=companions,
    ), tuple(w.in_file(path) for w in outcome.notes)


def convert_notebook_text(
    text: str,
    *,
    path: str = "<notebook>",
    target: str = DEFAULT_TARGET,
    disabled: frozenset[str] | set[str] = frozenset(),
    encoding: str = "utf-8",
    modules: Sequence[ModuleText] | None = None,
) -> Result:
    """Convert the JSON text of a notebook (``Result.old``/``new`` are the JSON texts)."""
    notebook = Notebook.open(text, path=path, encoding=encoding)
    if isinstance(notebook, Result):
        return notebook
    result, notes = _convert(notebook.text, path=path, target=target, disabled=disabled, encoding="utf-8",
                             modules=modules, notebook=True)
    return notebook.close(result, notes)


def convert_notebook(
    path: str,
    *,
    target: str = DEFAULT_TARGET,
    disabled: frozenset[str] | set[str] = frozenset(),
    modules: Sequence[ModuleText] | None = None,
) -> Result:
    """Read and convert one notebook; nothing is written."""
    try:
        text, encoding = read_notebook(path)
    except SourceError as error:
        return Result(path, FAILED, "", "", error=str(error))
    return convert_notebook_text(text, path=path, target=target, disabled=disabled, encoding=encoding, modules=modules)


def _parse_modules(modules: Sequence[ModuleText]) -> dict[str, cst.Module]:
    parsed: dict[str, cst.Module] = {}
    for local in modules:
        try:
            parsed[local.unit] = cst.parse_module(local.text)
        except cst.ParserSyntaxError:
            continue  # what comes from it is unknown to the conversion
    return parsed


def _companions(outcome: "Outcome", modules: Sequence[ModuleText]) -> tuple[Result, ...]:
    """A result per local module the conversion changed or warns about."""
    by_unit = {local.unit: local for local in modules}
    out = []
    for companion in outcome.companions:
        local = by_unit[companion.unit]
        new = (companion.code if companion.code is not None else companion.module.code) if outcome.status == CONVERTED else local.text
        if new != local.text:
            _check_output(new, local.path, entry=False)
        status = CONVERTED if new != local.text else outcome.status if outcome.status != CONVERTED else UNCHANGED
        out.append(Result(
            local.path, status, local.text, new,
            warnings=tuple(w.in_file(local.path) for w in companion.warnings),
            encoding=local.encoding,
        ))
    return tuple(out)


def convert_path(
    path: str | os.PathLike[str],
    *,
    target: str = DEFAULT_TARGET,
    disabled: frozenset[str] | set[str] = frozenset(),
) -> Result:
    """Read one file (PEP 263 encoding, BOM kept, binary refused; a notebook's code cells, see
    ``accelify.notebook``) and convert it; nothing is written. A file over the size limit is skipped."""
    name = os.fspath(path)
    if name.endswith(".ipynb"):
        return convert_notebook(name, target=target, disabled=disabled)
    try:
        source = read_source(name)
    except TooLargeError as error:
        return Result(name, SKIPPED, "", "", reason=error.reason)
    except SourceError as error:
        return Result(name, FAILED, "", "", error=str(error))
    result = convert_source(source.text, path=name, target=target, disabled=disabled, encoding=source.encoding)
    if result.status == SKIPPED and result.reason == NOT_A_CANDIDATE:
        return _loaded_by_name(result, source.text)
    return name_the_entry(result)


def _loaded_by_name(result: Result, code: str) -> Result:
    """A skipped entry whose package loads its training modules by name says which to convert instead."""
    from accelify.loaded_by_name import loaded_by_name

    try:
        found = loaded_by_name(result.path, cst.parse_module(code))
    except cst.ParserSyntaxError:
        return result
    return result if found is None else replace(result, reason=found.reason())


def name_the_entry(result: Result, path: str | os.PathLike[str] | None = None) -> Result:
    """A module that trains objects its caller builds, converted alone, needs attention and names the script to convert
    instead (``accelify.entries``): a trainer class whose loop walks the loader ``run.py`` builds would otherwise be
    "converted" preparing only what it sees. A module with ACC012 (a step function whose loop is in another module)
    names the script beside it (or above its package) that imports it. Such a module is never "unchanged" (exit 0), nor
    is a script no other imports whose own module has it (the program trains, and nothing of it is converted)."""
    from pathlib import Path

    parts = (result, *result.companions)
    ours = any(w.code == NOTHING_TO_PREPARE.code for part in parts for w in part.warnings)
    where = Path(path if path is not None else result.path)  # ``path``: where the file really is
    if result.path.endswith(".ipynb") or result.reason == ALREADY_CONVERTED or not where.is_file() or not (
            result.status == CONVERTED or (ours and result.status in (ATTENTION, UNCHANGED))):
        return result
    from accelify.entries import entry_for

    wide = any(w.code in _CALLER_SIGNS for part in parts for w in part.warnings)
    built = entry_for(where, wide=wide)
    if built is not None:
        fix = built.message()
    else:
        if not ours:
            return result
        from accelify.migrate.grouping import entries_using

        entries = entries_using(where)
        if not entries:  # the entry itself, whose program trains (a module it imports calls ``backward``) unconverted
            first = next((w for part in result.companions for w in part.warnings if w.code == NOTHING_TO_PREPARE.code), None)
            return result if result.status != UNCHANGED or first is None else \
                replace(result, status=ATTENTION, reason=first.message)
        fix = (f"convert {entries[0]} instead: it imports this module, which is converted with it (the loop here "
               "trains the objects that script builds)")

    def named(part: Result) -> Result:
        return replace(part, warnings=tuple(replace(w, fix=fix) if w.code == NOTHING_TO_PREPARE.code else w
                                            for w in part.warnings))

    if built is not None and result.status == CONVERTED:  # nothing of it is written: the entry converts it
        # the problems it shows alone (ACC022: no loader feeds its loop) are fixed by converting the entry
        return replace(result, status=ATTENTION, new=result.old, changes=(), companions=(), reason=fix,
                       warnings=tuple(replace(w, fix=fix) for w in result.warnings))
    out = replace(named(result), companions=tuple(named(c) for c in result.companions))
    if result.status == UNCHANGED:
        first = next(w for part in parts for w in part.warnings if w.code == NOTHING_TO_PREPARE.code)
        out = replace(out, status=ATTENTION, reason=first.message if built is None else fix)
    elif built is not None:
        out = replace(out, reason=fix)
    return out


def _syntax_error(code: str, error: cst.ParserSyntaxError) -> tuple[int, int, str]:
    """Line, column and message (``syntax error: ...``) of a syntax error, from Python's own parser where it agrees:
    it points at the offending token and says what is wrong ("Missing parentheses in call to 'print'"). Where Python
    reads the file, the line LibCST cannot read, and why (``cannot be read: ...``)."""
    try:
        ast.parse(code)
    except SyntaxError as exact:
        if exact.lineno is not None:
            return exact.lineno, exact.offset or 1, f"syntax error: {exact.msg}"
    except (ValueError, RecursionError):
        pass
    else:  # Python reads it; LibCST does not (a tab then spaces in one indentation: Python counts a tab to column 8)
        for number, text in enumerate(code.splitlines(), 1):
            indent = text[: len(text) - len(text.lstrip(" \t"))]
            if "\t" in indent and " " in indent and text.strip():
                return number, 1, ("cannot be read: Python reads this file, but the parser accelify uses (LibCST) does not: this line is "
                                   "indented with a tab and spaces together; re-indent the file with spaces (for "
                                   "example `expand -t 8`) and convert again")
    return error.raw_line, error.raw_column + 1, f"syntax error: {error.message}"


def _check_output(new: str, path: str, *, entry: bool) -> None:
    """The converted code parses, and the script creates an Accelerator (so a second run changes nothing)."""
    try:
        tree = ast.parse(new, filename=path)
    except SyntaxError as error:
        raise OutputCheckError(path, f"the converted code does not parse: line {error.lineno}: {error.msg}") from None
    if entry and not any(isinstance(node, ast.Name) and node.id == "Accelerator" for node in ast.walk(tree)):
        raise OutputCheckError(path, "the converted code creates no Accelerator, so a second run would convert it again")
