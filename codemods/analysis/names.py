"""What a name or attribute chain refers to, resolved from the module's own import statements.

Resolving aliases from the imports is cheap (no ScopeProvider) and is enough to match torch APIs
by qualified name whatever the spelling: ``import torch.nn as nn``, ``from torch import nn``,
``from torch.nn.utils import clip_grad_norm_ as clip`` all resolve to ``torch.nn...``.
"""

from __future__ import annotations

from typing import Mapping

import libcst as cst

# Private module paths that torch re-exports under a public name.
_CANONICAL: dict[str, str] = {
    "torch.nn.utils.clip_grad.clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "torch.nn.parallel.DataParallel",
    "torch.nn.DataParallel": "torch.nn.parallel.DataParallel",
    "torch.cuda.amp.grad_scaler.GradScaler": "torch.cuda.amp.GradScaler",
    "torch.utils.data.distributed.DistributedSampler": "torch.utils.data.DistributedSampler",
    "tqdm.std.tqdm": "tqdm.tqdm",
    "tqdm.auto.tqdm": "tqdm.tqdm",
    "tqdm.notebook.tqdm": "tqdm.tqdm",
    "tqdm.autonotebook.tqdm": "tqdm.tqdm",
    "tqdm.rich.tqdm": "tqdm.tqdm",
    "tqdm.contrib.telegram.tqdm": "tqdm.tqdm",
    "tqdm.tqdm_notebook": "tqdm.tqdm",  # the older spellings tqdm still exports (deprecated, still written)
    "tqdm.notebook.tqdm_notebook": "tqdm.tqdm",
    "tqdm.tqdm_gui": "tqdm.tqdm",
    "tqdm.gui.tqdm": "tqdm.tqdm",
    "fastprogress.fastprogress.progress_bar": "fastprogress.progress_bar",
    "rich.progress.Progress.track": "rich.progress.track",
}
# Progress bars that walk an iterable once and yield its items (the loop walks the loader they are handed): tqdm,
# rich's ``track``, alive-progress's ``alive_it``, fastprogress's ``progress_bar``, progressbar2's ``progressbar``,
# barbar's ``Bar`` (set U's U13: ``enumerate(Bar(train_loader))``).
PROGRESS_BARS = frozenset({"tqdm.tqdm", "rich.progress.track", "alive_progress.alive_it", "fastprogress.progress_bar",
                           "progressbar.progressbar", "barbar.Bar", "click.progressbar", "click.termui.progressbar"})


def dotted(expr: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


def module_name(node: cst.BaseExpression | None) -> str | None:
    """The dotted module of an import statement (``torch.nn``)."""
    return None if node is None else dotted(node)


class ImportMap:
    """Local name -> fully qualified name, from every import statement in a module."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()
        self.unit = "__main__"
        self.definitions: frozenset[str] = frozenset()
        self.package: str | None = None  # the package a relative import starts from (None: a script, no package)
        # what ``from X import *`` binds, for the local modules X of the program (``exports.star_exports``)
        self.exports: Mapping[str, Mapping[str, str]] = {}
        self._starred: set[str] = set()  # the names a star import bound

    def define(self, unit: str, names: list[str]) -> None:
        """This module is ``unit`` of a program; ``names`` are the functions and classes it defines.

        In a local module other than the script (``__main__``), a definition's qualified name is
        ``unit.name``, as the modules that import it see it (``from loops import fit`` -> ``loops.fit``)."""
        self.unit = unit
        self.definitions = frozenset(names)
        for name in self._starred & self.definitions:  # ``from utils import *`` then ``def train``: this module's own
            self.aliases.pop(name, None)

    def _absolute(self, level: int, module: str | None) -> str | None:
        """``from ..a import b`` in package ``p.q``: ``p.a``; None outside a package (or above its top)."""
        if self.package is None:
            return None
        parts = self.package.split(".")
        if level - 1 >= len(parts) + (0 if module else 1):
            return None
        parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, *([module] if module else [])]) or None

    def add(self, node: cst.Import | cst.ImportFrom) -> list[str]:
        """Record one import statement; returns the local names it binds."""
        bound: list[str] = []
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                self.modules.add(full)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                    self.aliases[local] = full
                else:
                    local = full.split(".")[0]
                    self.aliases.setdefault(local, local)
                bound.append(local)
            return bound
        base = self.source_module(node)
        if base is None:
            return bound
        self.modules.add(base)
        if isinstance(node.names, cst.ImportStar):
            for local, full in self.exports.get(base, {}).items():  # a local module's names, as if imported by name
                self.aliases[local] = full
                self._starred.add(local)
                bound.append(local)
            return bound
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.aliases[local] = f"{base}.{name}"
            bound.append(local)
        return bound

    def source_module(self, node: cst.ImportFrom) -> str | None:
        """The absolute module an ``from ... import`` statement imports from (None: a relative import outside a package)."""
        if node.relative:
            return self._absolute(len(node.relative), module_name(node.module))
        return module_name(node.module) or ""

    def qualname(self, expr: cst.BaseExpression) -> str | None:
        """The qualified name of a name/attribute chain (``nn.Linear`` -> ``torch.nn.Linear``)."""
        name = dotted(expr)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        full = self.aliases.get(head)
        if full is not None:
            name = f"{full}.{rest}" if rest else full
        elif head in self.definitions and self.unit != "__main__":
            name = f"{self.unit}.{name}"
        return _CANONICAL.get(name, name)

    def alias_of(self, module: str) -> str | None:
        """The local name a whole module is imported as (``torch`` of ``import torch``), or None."""
        return next((local for local, full in self.aliases.items() if full == module), None)

    def imports_any(self, *prefixes: str) -> bool:
        """Whether some import statement names a module under one of ``prefixes``."""
        return any(m == p or m.startswith(p + ".") for m in self.modules for p in prefixes)
