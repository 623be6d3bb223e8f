"""The entry scripts a module belongs to, and what they build for it: a module converted alone that trains objects its
caller builds needs attention naming the script to convert instead.

A trainer module (``class Trainer: def __init__(self, model, optimizer, loader)`` and a ``train()`` that walks
``self.loader``) has no training of its own: the model, the optimizer or the loader come from the script that imports
it (``train.py`` builds them and calls ``Trainer(...).train()``). Converted alone, it would prepare what it can see (an
optimizer it builds) and leave the rest, so the processes would train unsharded data or unwrapped models. Converted
from the entry, the whole program is prepared where the objects are built.

The search: every script of the project (the folder that holds the module's package first, then the nearest folder
above with ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``.git``; else the module's parent's parent when the
module alone shows signs of training what its caller builds) whose imports reach the module, found by a cheap scan of
import lines; the nearest few are then confirmed by the program discovery ``convert`` itself uses
(``program.local_modules``) and by the plan: the entry's program builds some of the objects the module's training
uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from accelify.program import (
    INSTALLED,
    entry_package,
    find_local,
    installed_root,
    local_modules,
    package_of,
    relative_import,
)

if TYPE_CHECKING:
    from accelify.codemods.analysis.plan import Plan
    from accelify.program import ModuleText

MARKERS = (*INSTALLED, ".git")  # a checkout is a project too, installed or not
SKIPPED_FOLDERS = {"__pycache__", "node_modules", "venv", "env", "build", "dist", "site-packages", ".venv"}
MAX_FILES = 2000  # scripts scanned under one root; a bigger tree is searched no further
MAX_DEPTH = 4  # folders below the root searched
CONFIRMED = 4  # entries confirmed by a full discovery (each parses its whole program)
ROLE_ORDER = ("model", "optimizer", "scheduler", "loader")


@dataclass(frozen=True)
class CallerBuilt:
    """An entry script whose program trains through the module: the script (as it should be named to the user), the
    module's trainer (``trainer.Trainer``, ``engine.loops.fit``) and the roles of the objects the entry's program
    builds for it (``("model", "optimizer", "loader")``)."""

    entry: str
    trainer: str
    roles: tuple[str, ...]

    def message(self) -> str:
        """``convert train.py instead: it builds the model, optimizer and loader that trainer.Trainer trains``."""
        roles = list(self.roles)
        listed = roles[0] if len(roles) == 1 else ", ".join(roles[:-1]) + " and " + roles[-1]
        return f"convert {self.entry} instead: it builds the {listed} that {self.trainer} trains"


def project_root(module: Path) -> Path | None:
    """The nearest folder above ``module`` holding a project marker (``pyproject.toml``, ``setup.py``, ``.git``), or
    None."""
    return installed_root(module, MARKERS)


def package_home(module: Path) -> Path:
    """The folder that holds ``module``'s top package (its own folder for a module outside any package)."""
    top = module.resolve().parent
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    return top


def scripts_under(root: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """The ``.py`` files under ``root`` down to ``depth`` folders below it (hidden and environment folders and links
    left out), at most ``MAX_FILES``."""
    found: list[Path] = []
    top = len(root.parts)
    for folder, subfolders, files in os.walk(root):
        if len(Path(folder).parts) - top >= depth:
            subfolders[:] = []
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in SKIPPED_FOLDERS)
        for name in sorted(files):
            path = Path(folder, name)
            if name.endswith(".py") and not path.is_symlink():
                found.append(path)
        if len(found) >= MAX_FILES:
            break
    return found[:MAX_FILES]


_SCANS: dict[Path, tuple[tuple[int, int], list[str]]] = {}


def _imports_of(path: Path) -> list[str]:
    """The import names of ``path`` (cached while the file is unchanged)."""
    from accelify.migrate.grouping import scan_imports

    try:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        if path in _SCANS and _SCANS[path][0] == key:
            return _SCANS[path][1]
        names = scan_imports(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []
    _SCANS[path] = (key, names)
    return names


def _direct_imports(path: Path, root: Path) -> set[Path]:
    """The local modules ``path`` imports, resolved from its own folder, its package's root and the project root
    (an over-approximation of where Python would look when some entry runs it)."""
    package = entry_package(path)
    levels = len(package.split(".")) if package else 0
    roots = list(dict.fromkeys([path.parent, path.parents[levels] if levels else path.parent, root]))
    unit = ".".join([*(package.split(".") if package else []), *([] if path.stem == "__init__" else [path.stem])])
    found: set[Path] = set()
    for name in _imports_of(path):
        if name.startswith("."):
            level = len(name) - len(name.lstrip("."))
            name = relative_import(package_of(unit, path), level, name.lstrip("."))
            if not name:
                continue
        for folder in roots:
            hit = find_local(name, folder)
            if hit is not None:
                found.add(hit.resolve())
                break
    return found


def _is_test(path: Path, root: Path) -> bool:
    """A test of the project (``test_*.py``, ``*_test.py``, ``conftest.py``, anything in a ``tests/`` folder under
    ``root``): it builds what it trains too, but it is no script to convert."""
    inner = path.relative_to(root).parts if path.is_relative_to(root) else (path.name,)
    return path.name.startswith("test_") or path.name.endswith("_test.py") or path.name == "conftest.py" or \
        any(part in ("tests", "test") for part in inner[:-1])


def importers(module: Path, root: Path | None = None) -> list[Path]:
    """The scripts under ``root`` (default: ``module``'s project) that import ``module``, directly or through other
    local modules, most likely entries first: scripts that no other importer imports, then the nearest to the module
    (tests and ``__init__.py`` files are no entries)."""
    target = module.resolve()
    root = root if root is not None else project_root(target) or package_home(target)
    scripts = scripts_under(root)
    words = {script: {part for name in _imports_of(script) for part in name.strip(".").split(".")} for script in scripts}
    uses: dict[Path, set[Path]] = {}
    reached: set[Path] = set()
    found = {target}
    while True:  # a script can import a module only by a name that holds its stem (its folder's, for ``__init__``)
        keys = {p.parent.name if p.name == "__init__.py" else p.stem for p in found}
        grown = False
        for script in scripts:
            if script in reached or script == target or not words[script] & keys:
                continue
            if script not in uses:
                uses[script] = _direct_imports(script, root)
            if uses[script] & found:
                reached.add(script)
                found.add(script)
                grown = True
        if not grown:
            break
    imported = {dep for script in reached for dep in uses.get(script, ())}
    entries = [s for s in reached if s.name != "__init__.py" and not _is_test(s, root)]

    def rank(script: Path) -> tuple[bool, int, str]:
        common = Path(os.path.commonpath([script, target]))
        distance = len(script.relative_to(common).parts) + len(target.relative_to(common).parts)
        return (script in imported, distance, str(script))

    return sorted(entries, key=rank)


def program_plan(script: Path) -> "tuple[Plan, list[ModuleText]] | None":
    """The plan of the program ``script`` is the entry of (its local modules found as ``convert`` finds them), and
    those modules; None when it cannot be read or analysed."""
    from accelify.codemods.analysis.collect import collect
    from accelify.codemods.analysis.exports import star_exports
    from accelify.codemods.analysis.facts import Facts
    from accelify.codemods.analysis.plan import Plan

    try:
        parsed_entry = cst.parse_module(script.read_text(encoding="utf-8", errors="replace"))
        found = local_modules(script, parsed_entry)
        parsed = {m.unit: cst.parse_module(m.text) for m in found}
        packages = {m.unit: package_of(m.unit, m.path) for m in found}
        packages["__main__"] = entry_package(script)
        exports = star_exports({"__main__": parsed_entry, **parsed}, packages)
        facts = collect(parsed_entry, package=packages["__main__"], exports=exports)
        others = [collect(m, u, packages.get(u), exports) for u, m in parsed.items()]
        return Plan(Facts.program(facts, others)), found
    except Exception:  # noqa: BLE001 - naming an entry must never take a conversion down
        return None


def built_by_caller(entry: Path, module: Path) -> CallerBuilt | None:
    """What ``entry``'s program builds for the training in ``module`` (None when its program does not hold the module,
    holds no training there, or builds nothing that training uses that the module's own program does not build: a
    script with a ``main()`` that builds its whole training stays an entry when a sweep script imports its loop)."""
    analysed = program_plan(entry)
    if analysed is None:
        return None
    plan, found = analysed
    target = module.resolve()
    unit = next((m.unit for m in found if Path(m.path).resolve() == target), None)
    if unit is None:
        return None
    trainer = _trainer(plan, unit)
    roles = {o.role for o in plan.objects if o.where.unit != unit and o.role in ROLE_ORDER}
    if trainer is None or not roles:
        return None
    alone = program_plan(target)
    if alone is not None and roles <= {o.role for o in alone[0].objects}:
        return None  # the module builds what its training needs itself
    return CallerBuilt(_shown(entry, module), trainer, tuple(r for r in ROLE_ORDER if r in roles))


def _trainer(plan: object, unit: str) -> str | None:
    """``trainer.Trainer`` (the class whose method trains, in ``unit``), ``loops.fit`` (a function), or None when no
    training runs in ``unit`` (no ``backward``, and no loop that reaches one)."""
    facts = plan.facts  # type: ignore[attr-defined]
    scopes = [s.scope for s in facts.calls if s.method == "backward" and s.scope.unit == unit]
    scopes += [loop.scope for loop in facts.loops if loop.scope.unit == unit and
               any(plan.reaches_backward(site) for site in loop.calls)]  # type: ignore[attr-defined]
    if not scopes:
        return None
    scope = scopes[0]
    owner = scope.class_scope
    name = owner.name if owner is not None else scope.name
    return unit if scope.kind == "module" else f"{unit}.{name}"


def _shown(entry: Path, module: Path) -> str:
    """The entry as the user names it: relative to the current folder when it is under it."""
    try:
        return os.path.relpath(entry) if entry.resolve().is_relative_to(Path.cwd().resolve()) else str(entry)
    except (OSError, ValueError):
        return str(entry)


def entry_for(module: Path, *, wide: bool = False) -> CallerBuilt | None:
    """The nearest entry script whose program trains through ``module`` with objects it builds, or None. The folder
    that holds the module's package (the module's own folder for a plain module) is searched first, then the project
    (its marked root; with ``wide``, a module that shows signs of training its caller's objects, the folder above
    when nothing marks one: ``trainer/trainer.py`` under ``train.py``)."""
    target = module.resolve()
    home = package_home(target)
    root = project_root(target)
    if root is None or not home.is_relative_to(root):
        root = home.parent if wide else home
    tried: set[Path] = set()
    try:
        for where in dict.fromkeys([home, root]):
            for entry in [e for e in importers(target, where) if e not in tried][:CONFIRMED]:
                tried.add(entry)
                built = built_by_caller(entry, module)
                if built is not None:
                    return built
    except (OSError, RuntimeError, ValueError):  # an unreadable tree, a link loop: no entry to name
        return None
    return None
