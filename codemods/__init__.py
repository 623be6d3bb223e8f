"""accelify.codemods: LibCST rules that turn a single-device PyTorch script into an Accelerate-style one.

Three layers, each importing only the ones below it:

- ``analysis/``: what the program is (facts, roles, the plan, the analyses rules ask for), found once;
- ``engine/``: how a conversion runs (``transform``, the ``Context`` a rule sees, the edits, the outcome);
- ``rules/``: one rule per module, in the ordered list ``rules.RULES``.

``codes`` is the one table of warning codes (each names the rule that raises it). Importing this package
is cheap: the rules (and LibCST) load when ``RULES`` or the engine is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RULES", "RULE_NAMES"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from accelify.codemods import rules

        return getattr(rules, name)
    raise AttributeError(f"module 'accelify.codemods' has no attribute {name!r}")
