"""The files a verification runs: a script and its local modules, read, converted, and written to a run folder.

A script often imports modules that sit next to it (``from model import Net``, ``from trainer import Trainer``).
:meth:`ScriptFiles.from_path` takes the script, the other ``.py`` files of its folder and its package folders (those
with an ``__init__.py``, and those the program imports modules from); :func:`convert_files` converts the script with
the modules it imports, found as ``accelify convert`` finds them (:func:`program_modules`), as one program (a module
the conversion does not edit stays as it is; package folders are copied, then their converted modules written). Each run gets its own folder, so
what one run writes (checkpoints, logs) never reaches another.

:func:`stage` puts a run's files where the script's relative paths work: in a mirror of the script's folder and
the two folders above it, whose other entries are links to the user's files (``data/train.txt``, ``../data``
read in place, never copied). The run's process writes copy-on-write (``hook/accelify_verify_sandbox.py``): what
it writes stays in the mirror, and the user's files are never written.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from accelify.results import Result
from accelify.verify.hook.accelify_verify_sandbox import MARKER

if TYPE_CHECKING:
    from accelify.program import ModuleText

LEVELS_UP = 2
"""How many folders above the script's the mirror holds (``../data``, ``../../datasets`` as examples read them)."""
MAX_ENTRIES = 5000
"""A folder with more entries than this is not mirrored (nor any above it): a home or temporary folder."""

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass(frozen=True)
class ScriptFiles:
    """A script (``name`` and ``source``) with its local modules ``(file name, source)`` and package folders."""

    name: str
    source: str
    modules: tuple[tuple[str, str], ...] = ()
    packages: tuple[Path, ...] = ()
    home: Path | None = None  # the folder the script was read from: its data are read from there


    @classmethod
    def from_path(cls, path: str | Path) -> "ScriptFiles":
        """The script at ``path`` with the other ``.py`` files and the package folders of its folder, and the
        packages its program imports from the root of the project it belongs to (``installed_root``: cleanrl's
        ``cleanrl/dqn.py`` imports ``cleanrl_utils`` beside ``cleanrl/``), as ``accelify convert`` finds them. Those
        are copied beside the script in a run folder, where they come first on the import path."""
        from accelify.program import installed_root
        from accelify.source import read_source

        script = Path(path)
        folder = script.resolve().parent
        modules = tuple(
            (other.name, read_source(str(other)).text)
            for other in sorted(folder.glob("*.py"))
            if other.name != script.name and other.is_file()
        )
        folders = [p for p in folder.iterdir() if p.is_dir()]
        packages = {p for p in folders if (p / "__init__.py").is_file()}
        project = installed_root(script)
        beside = {p.name for p in folders} | {name for name, _ in modules} | {script.name}
        above = [p for p in sorted(project.iterdir()) if p.is_dir() and p != folder and p.name not in beside
                 and (p / "__init__.py").is_file()] if project is not None and project != folder else []
        files = cls(script.name, read_source(str(script)).text, modules, tuple(folders + above), folder)
        # and a folder without an ``__init__.py`` whose modules the program imports (``from models.gan import GAN``)
        used = {Path(m.path).parts[0] for m in program_modules(files) if len(Path(m.path).parts) > 1}
        packages |= {folder / top for top in used if (folder / top).is_dir()} | {p for p in above if p.name in used}
        return replace(files, packages=tuple(sorted(packages)))

    def write(self, folder: Path) -> Path:
        """Write the script and its modules into ``folder`` (created), copy the packages; the script's path."""
        folder.mkdir(parents=True, exist_ok=True)
        for package in self.packages:
            shutil.copytree(package, folder / package.name, ignore=_IGNORED, dirs_exist_ok=True)
        for name, source in self.modules:  # after the packages: a converted package module replaces its original
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(source, encoding="utf-8")
        script = folder / self.name
        script.write_text(self.source, encoding="utf-8")
        return script


def stage(files: ScriptFiles, root: Path) -> Path:
    """Write ``files`` for one run under ``root`` (created; it must not exist) and return the script's folder (the
    run's working directory). With a ``home``, ``root`` mirrors the home and up to :data:`LEVELS_UP` folders above
    it: real folders whose other entries link to the user's; without one, the files are written in ``root``."""
    root.mkdir(parents=True)
    if files.home is None:
        files.write(root)
        return root
    home = files.home.resolve()
    chain = [home]
    for parent in home.parents:
        if len(chain) > LEVELS_UP or parent == Path(parent.anchor) or _crowded(parent):
            break
        chain.append(parent)
    top = chain[-1]
    own = {files.name, "__pycache__", *(Path(name).parts[0] for name, _ in files.modules), *(p.name for p in files.packages)}
    for below, folder in zip([None, *chain], chain):
        here = root / folder.relative_to(top)
        here.mkdir(parents=True, exist_ok=True)
        skip = own if folder == home else {below.name} if below is not None else set()
        for entry in sorted(folder.iterdir()):
            if entry.name not in skip and entry.name != MARKER:
                os.symlink(entry, here / entry.name, target_is_directory=entry.is_dir())
    (root / MARKER).write_text("accelify verify: this folder mirrors the script's; writes copy, never reach it\n")
    script = files.write(root / home.relative_to(top))
    return script.parent


def _crowded(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return any(i >= MAX_ENTRIES for i, _ in enumerate(entries))
    except OSError:
        return True


def convert_files(files: ScriptFiles, *, target: str = "accelify") -> tuple[ScriptFiles, Result]:
    """The conversion of ``files`` and the pipeline's result: the script with the local modules it imports, found as
    ``accelify convert`` finds them (``program_modules``: modules beside it, packages, relative imports), converted
    together as one program. A module the conversion edits (a companion of the result) is replaced by its
    conversion, in its package folder too (``trainer/trainer.py``)."""
    from accelify.pipeline import convert_source

    if files.home is not None and not files.name.endswith(".ipynb"):
        from accelify.program import entry_package

        if entry_package(files.home / files.name) is not None:  # a file of a package: read from the package's root
            from accelify.pipeline import convert_path

            result = convert_path(files.home / files.name, target=target)
            if result.status != "converted":  # convert's verdict (attention naming the entry, unchanged, skipped)
                return files, result
    local = program_modules(files)
    if files.name.endswith(".ipynb"):
        from accelify.pipeline import convert_notebook_text

        result = convert_notebook_text(files.source, path=files.name, target=target, modules=local)
    else:
        result = convert_source(files.source, path=files.name, target=target, modules=local)
        if files.home is not None:  # a module another script imports and trains through: as convert says it
            from accelify.pipeline import name_the_entry

            result = name_the_entry(result, files.home / files.name)
    converted = {c.path: c.new for c in result.companions if c.changed}
    modules = tuple((name, converted.pop(name, source)) for name, source in files.modules)
    return replace(files, source=result.new, modules=modules + tuple(converted.items())), result


def as_program(files: ScriptFiles) -> ScriptFiles:
    """A notebook's files as the program its runs execute (``nb.ipynb`` -> ``nb.ipynb.py``, its code cells in
    order, IPython lines as ``pass``: ``accelify.notebook.runnable_program``); a script as it is."""
    if not files.name.endswith(".ipynb"):
        return files
    from accelify.notebook import runnable_program

    code, _ = runnable_program(files.source, files.name)
    return replace(files, name=files.name + ".py", source=code)


def program_modules(files: ScriptFiles) -> list["ModuleText"]:
    """The local modules the script imports, directly or through each other, found as ``accelify convert`` finds
    them on disk (``accelify.program.discover``), among ``files``' modules and package folders: only those are
    analysed with it, never an unrelated script of the same folder. Paths are relative to the script's folder."""
    import libcst as cst

    from accelify.errors import SourceError
    from accelify.program import discover
    from accelify.source import read_source

    texts = dict(files.modules)
    folders = {p.name: p for p in files.packages}

    def find(name: str) -> tuple[str, str, str] | None:
        base = name.replace(".", "/")
        for relative in (f"{base}.py", f"{base}/__init__.py"):
            if relative == files.name:
                return None
            if relative in texts:
                return relative, texts[relative], "utf-8"
            top, _, rest = relative.partition("/")
            path = folders[top] / rest if top in folders and rest else None
            if path is not None and path.is_file():
                try:
                    source = read_source(str(path))
                except SourceError:
                    return None  # as convert: a module it cannot read is unknown to the conversion
                return relative, source.text, source.encoding
        return None

    try:
        module = cst.parse_module(as_program(files).source)
    except (cst.ParserSyntaxError, SourceError):
        return []
    return discover(module, find)


def imported_modules(files: ScriptFiles) -> set[str]:
    """The paths (relative to the script's folder) of the local modules the script imports (``program_modules``)."""
    return {module.path for module in program_modules(files)}
