"""The local modules a script imports, found the way Python would find them when it runs the script.

``python train.py`` puts the script's folder first on ``sys.path``, so ``import data`` and ``from
loops import fit`` load ``data.py`` and ``loops.py`` beside it (or ``data/__init__.py``). Those are the
modules the conversion of a script follows objects into; everything else (torch, installed packages)
is a library. Modules are read once, in the order they are first imported, up to ``LIMIT`` of them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.errors import SourceError
from accelify.source import read_source

LIMIT = 64  # local modules followed from one script; a bigger tree is a package, for `accelify migrate`
ABOVE = 2  # folders above a script (past its packages) searched last for a module no installed one shadows


@dataclass(frozen=True)
class ModuleText:
    """A local module of a program: its import name, where it is, its text and encoding."""

    unit: str
    path: str
    text: str
    encoding: str = "utf-8"


def imported_names(module: cst.Module, package: str | None = None) -> list[str]:
    """Absolute module names a module imports, in order (``from a.b import c`` gives ``a.b`` and ``a.b.c``:
    ``c`` may be a module). Relative imports count in a module of ``package`` (``from .trainer import Trainer``
    in ``trainer/__init__.py`` gives ``trainer.trainer``); a script run as a file has no package."""
    names: list[str] = []
    for node in m.findall(module, m.Import() | m.ImportFrom()):
        if isinstance(node, cst.Import):
            for alias in node.names:
                names.append(_dotted(alias.name))
        elif isinstance(node, cst.ImportFrom) and (node.module is not None or node.relative):
            base = _dotted(node.module) if node.module is not None else ""
            if node.relative:
                base = relative_import(package, len(node.relative), base)
                if not base:
                    continue
            names.append(base)
            if not isinstance(node.names, cst.ImportStar):
                names.extend(f"{base}.{_dotted(alias.name)}" for alias in node.names)
    return [n for n in dict.fromkeys(names) if n]


def relative_import(package: str | None, level: int, module: str) -> str:
    """The absolute name of a relative import (``..a`` from package ``p.q`` is ``p.a``), or "" outside a package."""
    if not package:
        return ""
    parts = package.split(".")
    if level - 1 > len(parts) - (0 if module else 1):
        return ""
    kept = parts[: len(parts) - (level - 1)]
    return ".".join([*kept, *([module] if module else [])])


def package_of(unit: str, path: str | os.PathLike[str]) -> str | None:
    """The package a local module's relative imports start from: itself for an ``__init__.py``, else its parent
    package (None for a top-level module)."""
    if os.path.basename(os.fspath(path)) == "__init__.py":
        return unit
    return unit.rpartition(".")[0] or None


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def find_local(name: str, folder: Path) -> Path | None:
    """``folder/a/b.py`` or ``folder/a/b/__init__.py`` for ``a.b``, if it exists."""
    base = folder.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# Where a program's module is: import name -> (its path as shown, text, encoding), or None (not a local module).
Finder = Callable[[str], "tuple[str, str, str] | None"]


def discover(module: cst.Module, find: Finder, package: str | None = None) -> list[ModuleText]:
    """The local modules a program's entry (parsed as ``module``) uses, directly or through each other, in the order
    they are first imported, up to ``LIMIT``; ``find`` says where an import name's module is. The one search that
    ``convert`` (modules on disk, ``local_modules``) and ``verify`` (a run's files) share, so that both read the same
    program. A module that cannot be parsed is left out: what comes from it is unknown to the conversion."""
    found: list[ModuleText] = []
    seen: set[str] = set()
    pending = list(imported_names(module, package))  # ``package``: the entry's own (a file converted inside one)
    while pending and len(found) < LIMIT:
        name = pending.pop(0)
        hit = find(name)
        if hit is None or hit[0] in seen:
            continue
        path, text, encoding = hit
        seen.add(path)
        try:
            parsed = cst.parse_module(text)
        except cst.ParserSyntaxError:
            continue
        found.append(ModuleText(name, path, text, encoding))
        pending.extend(imported_names(parsed, package_of(name, path)))
    return found


def entry_package(script: str | os.PathLike[str]) -> str | None:
    """The package a file belongs to (``engine`` for ``engine/loops.py`` when ``engine/__init__.py`` exists), which
    its relative imports start from; None for a script beside no ``__init__.py``."""
    folder = Path(script).resolve().parent
    parts: list[str] = []
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts) or None


INSTALLED = ("pyproject.toml", "setup.py", "setup.cfg")  # a project installed for development puts its root on the path


def installed_root(script: str | os.PathLike[str], markers: tuple[str, ...] = INSTALLED) -> Path | None:
    """The nearest folder holding ``script`` with ``pyproject.toml``, ``setup.py`` or ``setup.cfg`` (or another of
    ``markers``): a project installed for development (``pip install -e .``, ``poetry install``) imports its root's
    packages from anywhere (cleanrl's ``cleanrl/dqn.py`` imports ``cleanrl_utils`` beside ``cleanrl/``). None when
    there is none."""
    folder = Path(script).resolve().parent
    for above in (folder, *folder.parents):
        if any((above / marker).exists() for marker in markers):
            return above
    return None


def local_modules(script: str | os.PathLike[str], module: cst.Module) -> list[ModuleText]:
    """The local modules ``script`` (already parsed as ``module``) uses, directly or through each other, found on
    disk beside it as ``python script`` finds them (paths as the user wrote the script's). A file inside a package
    (``engine/loops.py``, converted alone) also finds its package's modules from the package's root, its relative
    imports included; then the root of the project it belongs to (``installed_root``). A module that cannot be read
    is left out."""
    entry = Path(script).resolve()
    package = entry_package(script)
    levels = len(package.split(".")) if package else 0
    # beside it first, as Python looks, then each folder above up to its outermost package's parent: a repository
    # whose root holds a stray ``__init__.py`` runs ``python main.py`` from that root, where ``datasets/`` is found
    roots = [entry.parent, *(entry.parents[i] for i in range(1, levels + 1))]
    project = installed_root(script)
    if project is not None and project not in roots:
        roots.append(project)
    # last, a folder or two above: a script in ``scripts/`` importing ``src.a2c`` runs from the repository's root
    # (``python -m``, ``PYTHONPATH=.``, or ``sys.path.append("..")``); only a name no installed module has
    above = [p for p in entry.parents[levels + 1:levels + 1 + ABOVE] if p not in roots and p.parent != p]
    shown = Path(os.path.dirname(os.fspath(script)))  # paths as the user wrote the script's

    def where(path: Path) -> str:
        if path.is_relative_to(entry.parent):
            return str(shown / path.relative_to(entry.parent))
        return str(path) if os.path.isabs(script) else os.path.relpath(path)  # above the script's own folder

    def find(name: str) -> tuple[str, str, str] | None:
        path = next((p for p in (find_local(name, root) for root in roots) if p is not None), None)
        if path is None and above and not _installed(name.split(".")[0], above):
            path = next((p for p in (find_local(name, root) for root in above) if p is not None), None)
        if path is None or path.resolve() == entry:
            return None
        try:
            source = read_source(path)
        except SourceError:
            return None
        return where(path), source.text, source.encoding

    return discover(module, find, package)


def _installed(top: str, folders: list[Path]) -> bool:
    """Whether this interpreter imports ``top`` from somewhere else than ``folders``, the program's own (torch,
    numpy, a standard module): such a name is never looked for above the script. Found in one of ``folders``
    (``PYTHONPATH=.`` from the repository's root, as the program itself is run) it is the program's."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    places = [spec.origin] if spec.origin is not None else []
    places += list(spec.submodule_search_locations or [])
    return not places or not all(any(Path(p).resolve().is_relative_to(f) for f in folders) for p in places)


_IMPORTED_FIRST = re.compile(r"(?:^|;)[ \t]*(?:import|from)[ \t]+([\w, \t]+)", re.MULTILINE)


def may_import_local(code: str, script: str | os.PathLike[str]) -> bool:
    """Whether ``code`` may import a module beside ``script`` (or at its project's root): some name its import
    statements start with is a ``name.py`` or a ``name/`` folder there. A text test that never says no wrongly (every
    module ``local_modules`` finds starts with such a name), so the full search, which walks the whole
    tree, runs only where it can find something."""
    folder = Path(script).parent
    project = installed_root(script)
    try:
        present = {entry.name for entry in os.scandir(folder or ".")}
        if project is not None and project != folder.resolve():
            present |= {entry.name for entry in os.scandir(project)}
        for above in Path(script).resolve().parents[1:1 + ABOVE]:  # as ``local_modules`` looks last
            if above.parent != above:
                present |= {entry.name for entry in os.scandir(above)}
    except OSError:
        return True
    for names in _IMPORTED_FIRST.findall(code):
        for name in names.replace("\t", " ").split(","):
            first = name.strip().split(" ")[0].split(".")[0]
            if first and (first + ".py" in present or first in present):
                return True
    return False
