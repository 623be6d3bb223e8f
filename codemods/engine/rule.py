"""The base class of every codemod rule, and the executable examples each rule carries."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import ClassVar

from accelify.codemods.engine.context import Context


@dataclass(frozen=True)
class Example:
    """A small whole script and its whole conversion (for ``target``), run by the tests.

    ``fires`` says whether the rule takes part: for a near miss (``fires=False``) converting with the
    rule disabled gives the same ``after``. ``after=None`` means the file is left unchanged.
    ``warnings`` are the reported warnings as ``"ACCnnn:line"`` (``"ACCnnn:data.py:line"`` in a module).
    ``modules`` are the local modules the script imports, ``(file name, before, after)`` (``after`` None: the
    module is left as it is), for what a rule does to a program of several files.
    """

    before: str
    after: str | None = None
    fires: bool = True
    warnings: tuple[str, ...] = ()
    target: str = "accelify"
    modules: tuple[tuple[str, str, str | None], ...] = ()

    @property
    def module_texts(self) -> list[tuple[str, str, str]]:
        """``(file name, before, expected after)`` of each module, dedented as the script is."""
        clean = [(path, textwrap.dedent(before).lstrip("\n"), after) for path, before, after in self.modules]
        return [(path, before, before if after is None else textwrap.dedent(after).lstrip("\n"))
                for path, before, after in clean]

    @property
    def source(self) -> str:
        return textwrap.dedent(self.before).lstrip("\n")

    @property
    def expected(self) -> str:
        return self.source if self.after is None else textwrap.dedent(self.after).lstrip("\n")


class Rule:
    """One conversion concern. ``run`` reads ``ctx.plan`` and proposes edits and warnings on ``ctx``.

    ``name`` is the rule's module name in ``codemods/rules/`` and what ``[tool.accelify] disable = [...]``
    refers to. ``examples`` (Fixit-style) are the rule's documentation and its tests: the class
    docstring shows them, and ``tests/codemods/test_rule_examples.py`` runs every one.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    examples: ClassVar[tuple[Example, ...]] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        shown = [e for e in cls.examples if e.fires][:1] + [e for e in cls.examples if not e.fires][:1]
        parts = [cls.__doc__ or cls.description]
        for example in shown:
            label = "Before" if example.fires else "Left alone (near miss)"
            parts.append(f"{label}::\n\n{textwrap.indent(example.source, '    ')}")
            if example.fires:
                parts.append(f"After::\n\n{textwrap.indent(example.expected, '    ')}")
        cls.__doc__ = "\n\n".join(p.rstrip() for p in parts)

    def run(self, ctx: Context) -> None:  # pragma: no cover - every rule overrides it
        raise TypeError(f"{type(self).__name__} must define run()")

    def recheck(self, ctx: Context) -> None:
        """A second look at converted code (the file already uses an ``Accelerator``): report, without editing,
        the problems this rule leaves to the user that are still there, so ``convert --check`` keeps failing on
        them until they are fixed. ``ctx`` knows where the code creates the accelerator; nothing is proposed."""
