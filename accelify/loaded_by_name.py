"""Entry scripts whose training is loaded by name at run time, so that no import the converter can follow reaches it.

A template project's ``main.py`` imports ``agents``, whose ``__init__.py`` imports every module of its folder with
``__import__`` (or ``importlib.import_module``), and then picks a class by a configuration string
(``globals()[config.agent]``). The entry imports no torch and no module that does, so it is skipped as "does not import
torch", a reason the user cannot act on. Here the skip names the package that loads modules by name and the modules of
it that import torch: those are what to convert.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.names import dotted
from accelify.errors import SourceError
from accelify.program import local_modules
from accelify.source import read_source

_LOADERS = m.Call(func=m.Name("__import__") | m.Name("import_module") | m.Attribute(attr=m.Name("import_module")))
SHOWN = 3  # modules named in the reason; the rest are counted


@dataclass(frozen=True)
class LoadedByName:
    """A package of the program that imports its own modules by name (``loader``: its ``__init__.py``) and the modules
    beside it that import torch (``training``), as paths written like the script's."""

    loader: str
    training: tuple[str, ...]

    def reason(self) -> str:
        """Why the entry is skipped, and what to convert instead."""
        names = ", ".join(self.training[:SHOWN]) + (f" and {len(self.training) - SHOWN} more"
                                                    if len(self.training) > SHOWN else "")
        return (f"does not import torch: it loads its training by name at run time ({self.loader} imports the "
                f"modules of its folder by name), which a conversion cannot follow; convert the module that trains "
                f"instead ({names})")


def loaded_by_name(script: str | os.PathLike[str], module: cst.Module) -> LoadedByName | None:
    """The first local package ``script`` imports whose ``__init__.py`` imports modules by a computed name and has
    modules beside it that import torch; ``None`` when there is none."""
    for local in local_modules(script, module):
        if os.path.basename(local.path) != "__init__.py" or not _calls_a_loader(local.text):
            continue
        folder = Path(local.path).parent
        training = tuple(str(folder / path.name) for path in sorted(folder.glob("*.py"))
                         if path.name != "__init__.py" and _imports_torch(path))
        if training:
            return LoadedByName(local.path, training)
    return None


def _calls_a_loader(text: str) -> bool:
    try:
        tree = cst.parse_module(text)
    except cst.ParserSyntaxError:
        return False
    return bool(m.findall(tree, _LOADERS))


def _imports_torch(path: Path) -> bool:
    try:
        tree = cst.parse_module(read_source(path).text)
    except (SourceError, cst.ParserSyntaxError):
        return False
    names = [dotted(alias.name) for node in m.findall(tree, m.Import())
             for alias in node.names]  # type: ignore[union-attr]
    names += [dotted(node.module) for node in m.findall(tree, m.ImportFrom(relative=[]))
              if node.module is not None]  # type: ignore[union-attr]
    return any((name or "").split(".")[0] == "torch" for name in names)
