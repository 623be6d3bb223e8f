"""How ``accelify migrate`` groups the candidates of a folder into jobs, without parsing anything.

A cheap scan of each candidate's import lines finds the local modules it uses (``import data`` -> ``data.py``
beside it, as ``accelify.program`` finds them). A candidate that another candidate imports is not converted on
its own: it is converted with the script(s) that import it, as their companion. Scripts that share a module are
one job, so that the module is written once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from accelify.program import entry_package, find_local, installed_root, package_of, relative_import
from accelify.settings import Settings


@dataclass(frozen=True)
class Task:
    """One script to convert, with its settings (picklable: sent to a worker)."""

    path: str
    target: str
    disabled: frozenset[str]


@dataclass(frozen=True)
class Job:
    """Scripts converted together (they share local modules), and the candidate modules they take along."""

    tasks: tuple[Task, ...]
    modules: tuple[str, ...] = ()  # candidates converted as these scripts' companions, not on their own


_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+\(?([^#\n]*)|import[ \t]+([^#\n]+))", re.M)


def scan_imports(text: str) -> list[str]:
    """The absolute module names a file's import lines name (``from a import b`` gives ``a`` and ``a.b``),
    found with a regular expression: a cheap over-approximation of ``program.imported_names``."""
    names: list[str] = []
    for base, members, plain in _IMPORT_LINE.findall(text):
        if base:
            listed = [n.split(" as ")[0].strip() for n in members.strip(" ()\\").split(",") if n.strip()]
            if base.strip("."):
                names.append(base)
            joint = "" if not base.strip(".") else "."  # ``from . import x`` names ``.x``; ``from .a import x``, ``.a.x``
            names.extend(f"{base}{joint}{n}" for n in listed)
        else:
            names.extend(n.split(" as ")[0].strip() for n in plain.split(",") if n.strip())
    return [n for n in dict.fromkeys(names) if n and n.replace(".", "").replace("_", "").isalnum()]  # ``.a``: relative


def _code_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(data).get("cells", [])
            return "\n".join(
                "".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"
            )
        except (ValueError, AttributeError):
            return ""
    return data.decode("utf-8", errors="replace")


_MAIN_GUARD = re.compile(r"""^if[ \t(]+__name__[ \t]*==[ \t]*['"]__main__['"]""", re.M)


def runs_as_script(path: Path) -> bool:
    """Whether ``path`` is a program of its own: a ``.py`` file with a top-level ``if __name__ == "__main__":``
    (tiny-diffusion's ``ddpm.py``, which a notebook beside it also imports for its classes), found by a scan of its
    lines as the imports are."""
    return path.suffix == ".py" and _MAIN_GUARD.search(_code_text(path)) is not None


def local_closure(script: Path, cache: dict[Path, list[str]]) -> set[Path]:
    """The local modules ``script`` may use, directly or through each other (resolved paths)."""
    folder = script.parent
    package = entry_package(script)  # ``pkg/train.py`` run as ``python -m pkg.train``: ``from pkg.trainer import ...``
    levels = len(package.split(".")) if package else 0
    roots = [folder, *([script.parents[levels]] if levels else [])]  # beside it first, as Python looks
    project = installed_root(script)  # then the installed project's root, as ``program.local_modules`` looks
    if project is not None and project not in roots:
        roots.append(project)
    found: set[Path] = set()
    own = [] if script.stem == "__init__" else [script.stem]
    units = {script: ".".join([*([package] if package else []), *own])}  # the name each is imported by
    pending = [script]
    while pending:
        current = pending.pop()
        if current not in cache:
            cache[current] = scan_imports(_code_text(current))
        for name in cache[current]:
            if name.startswith("."):  # ``from .loops import fit`` in ``engine/__init__.py``: ``engine.loops``
                level = len(name) - len(name.lstrip("."))
                name = relative_import(package_of(units[current], current), level, name.lstrip("."))
                if not name:
                    continue
            module = next((hit for hit in (find_local(name, root) for root in roots) if hit is not None), None)
            if module is None:
                continue
            module = module.resolve()
            if module != script and module not in found:
                found.add(module)
                units[module] = name
                pending.append(module)
    return found


def plan(candidates: Sequence[Path], settings_for: Callable[[Path], Settings]) -> list[Job]:
    """Group the candidates into jobs: each script with the candidate modules it imports; scripts that
    share a module in one job; a candidate imported by another is converted only with it."""
    real = {p.resolve(): p for p in candidates}
    cache: dict[Path, list[str]] = {}
    uses = {r: local_closure(r, cache) for r in real}
    imported = {m for deps in uses.values() for m in deps if m in real}
    entries = [r for r in real if r not in imported]
    covered = set(entries).union(*(uses[e] for e in entries)) if entries else set()
    for r in sorted(real, key=str):  # files that only import each other in a cycle: the first one leads
        if r not in covered:
            entries.append(r)
            covered |= {r} | uses[r]
    # union-find over shared modules: scripts that share one are converted in one job
    parent = {e: e for e in entries}

    def root(x: Path) -> Path:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[Path, Path] = {}
    for entry in sorted(entries, key=str):
        for module in uses[entry]:
            if module in owner:
                parent[root(entry)] = root(owner[module])
            else:
                owner[module] = entry
    groups: dict[Path, list[Path]] = {}
    for entry in sorted(entries, key=str):
        groups.setdefault(root(entry), []).append(entry)
    jobs = []
    for members in groups.values():
        tasks = []
        for entry in members:
            settings = settings_for(real[entry])
            tasks.append(Task(str(real[entry]), settings.target, frozenset(settings.disable)))
        modules = sorted({str(real[m]) for e in members for m in uses[e] if m in real and m not in members}, key=str)
        jobs.append(Job(tuple(tasks), tuple(modules)))
    return sorted(jobs, key=lambda j: j.tasks[0].path)


def entries_using(module: Path) -> list[Path]:
    """The scripts beside ``module`` (``.py`` and ``.ipynb`` files of its folder, and of the folders above it up to the
    package root) that import it, directly or through other local modules: the programs it belongs to. A module
    checked alone (a pre-commit hook names only the staged file) is checked with them."""
    target = module.resolve()
    folder = module.parent  # as given, so the scripts are named as the user names the module
    folders = [folder]  # the scripts beside it (``examples/train.py`` beside ``examples/data.py``), then above
    while (folder / "__init__.py").is_file() and folder.resolve().parent != folder.resolve():
        folder = folder.parent if folder != Path(".") else Path("..")  # a package's programs sit above it
        folders.append(folder)
    cache: dict[Path, list[str]] = {}
    found: list[Path] = []
    for where in dict.fromkeys([folders[0], folders[-1]]):
        for candidate in sorted([*where.glob("*.py"), *where.glob("*.ipynb")]):
            resolved = candidate.resolve()
            if resolved != target and candidate.is_file() and target in local_closure(resolved, cache):
                found.append(candidate)
    # a module of another one found (``engine/loops.py`` that ``train.py`` imports) belongs to that one's program
    inner = {m for c in found for m in local_closure(c.resolve(), cache)}
    return [c for c in found if c.resolve() not in inner]
