"""The files a verification runs: a script and its local modules, read, converted, and written to a run folder.

A script often imports modules that sit next to it (``from model import Net``). :meth:`ScriptFiles.from_path`
takes the script, the other ``.py`` files of its folder and its package folders (those with an ``__init__.py``);
:func:`convert_files` converts the script with those ``.py`` modules as one program, as ``accelify convert`` does (a
module the conversion does not edit stays as it is; package folders are copied as they are). Each run gets its own folder, so
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

from accelify.results import Result
from accelify.verify.hook.accelify_verify_sandbox import MARKER

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
        """The script at ``path`` with the other ``.py`` files and the package folders of its folder."""
        from accelify.source import read_source

        script = Path(path)
        folder = script.resolve().parent
        modules = tuple(
            (other.name, read_source(str(other)).text)
            for other in sorted(folder.glob("*.py"))
            if other.name != script.name and other.is_file()
        )
        packages = tuple(sorted(p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()))
        return cls(script.name, read_source(str(script)).text, modules, packages, folder)

    def write(self, folder: Path) -> Path:
        """Write the script and its modules into ``folder`` (created), copy the packages; the script's path."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, source in self.modules:
            (folder / name).write_text(source, encoding="utf-8")
        for package in self.packages:
            shutil.copytree(package, folder / package.name, ignore=_IGNORED, dirs_exist_ok=True)
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
    own = {files.name, "__pycache__", *(name for name, _ in files.modules), *(p.name for p in files.packages)}
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
    """The conversion of ``files`` (the script with its ``.py`` modules, converted together as the tool converts
    them: a module the script's conversion edits is a companion of its result) and the pipeline's result."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    used = imported_modules(files)
    local = [ModuleText(name[:-3], name, source) for name, source in files.modules if name in used]
    if files.name.endswith(".ipynb"):
        from accelify.pipeline import convert_notebook_text

        result = convert_notebook_text(files.source, path=files.name, target=target, modules=local)
    else:
        result = convert_source(files.source, path=files.name, target=target, modules=local)
    converted = {c.path: c.new for c in result.companions if c.changed}
    modules = tuple((name, converted.get(name, source)) for name, source in files.modules)
    return replace(files, source=result.new, modules=modules), result


def as_program(files: ScriptFiles) -> ScriptFiles:
    """A notebook's files as the program its runs execute (``nb.ipynb`` -> ``nb.ipynb.py``, its code cells in
    order, IPython lines as ``pass``: ``accelify.notebook.runnable_program``); a script as it is."""
    if not files.name.endswith(".ipynb"):
        return files
    from accelify.notebook import runnable_program

    code, _ = runnable_program(files.source, files.name)
    return replace(files, name=files.name + ".py", source=code)


def imported_modules(files: ScriptFiles) -> set[str]:
    """The file names of the modules beside the script that it imports, directly or through each other: only
    those are analysed with it (as ``accelify convert`` does), never an unrelated script of the same folder."""
    import libcst as cst

    from accelify.program import imported_names

    sources = dict(files.modules)
    used: set[str] = set()
    pending = [as_program(files).source] if files.name.endswith(".ipynb") else [files.source]
    while pending:
        try:
            module = cst.parse_module(pending.pop())
        except cst.ParserSyntaxError:
            continue
        for name in imported_names(module):
            file = name.split(".")[0] + ".py"
            if file in sources and file not in used:
                used.add(file)
                pending.append(sources[file])
    return used
