"""The base class of every codemod rule."""

from __future__ import annotations

from typing import ClassVar

from accelify.codemods.context import Context


class Rule:
    """One conversion concern. ``run`` reads ``ctx.plan`` and proposes edits and warnings on ``ctx``.

    ``name`` is what ``[tool.accelify] disable = [...]`` refers to.
    """

    name: ClassVar[str]
    description: ClassVar[str]

    def run(self, ctx: Context) -> None:  # pragma: no cover - every rule overrides it
        raise TypeError(f"{type(self).__name__} must define run()")
