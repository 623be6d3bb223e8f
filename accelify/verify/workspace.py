"""The files a verification runs: a script and its local modules, read, converted, and written to a run folder.

A script often imports modules that sit next to it (``from model import Net``). :meth:`ScriptFiles.from_path`
takes the script, the other ``.py`` files of its folder and its package folders (those with an ``__init__.py``);
:func:`convert_files` converts the script with those ``.py`` modules as one program, as ``accelify convert`` does (a
module the conversion does not edit stays as it is; package folders are copied as they are). Each run gets its own folder, so
what one run writes (checkpoints, logs) never reaches another.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from accelify.results import Result

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass(frozen=True)
class ScriptFiles:
    """A script (``name`` and ``source``) with its local modules ``(file name, source)`` and package folders."""

    name: str
    source: str
    modules: tuple[tuple[str, str], ...] = ()
    packages: tuple[Path, ...] = ()

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
        return cls(script.name, read_source(str(script)).text, modules, packages)

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


def convert_files(files: ScriptFiles, *, target: str = "accelify") -> tuple[ScriptFiles, Result]:
    """The conversion of ``files`` (the script with its ``.py`` modules, converted together as the tool converts
    them: a module the script's conversion edits is a companion of its result) and the pipeline's result."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    used = imported_modules(files)
    local = [ModuleText(name[:-3], name, source) for name, source in files.modules if name in used]
    result = convert_source(files.source, path=files.name, target=target, modules=local)
    converted = {c.path: c.new for c in result.companions if c.changed}
    modules = tuple((name, converted.get(name, source)) for name, source in files.modules)
    return replace(files, source=result.new, modules=modules), result


def imported_modules(files: ScriptFiles) -> set[str]:
    """The file names of the modules beside the script that it imports, directly or through each other: only
    those are analysed with it (as ``accelify convert`` does), never an unrelated script of the same folder."""
    import libcst as cst

    from accelify.program import imported_names

    sources = dict(files.modules)
    used: set[str] = set()
    pending = [files.source]
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
