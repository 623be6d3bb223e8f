"""accelify.codemods: LibCST rules that turn a single-device PyTorch script into an Accelerate-style one.

The engine lives here (``analysis`` -> ``facts``, ``plan`` -> ``context`` -> ``edits``, run by
``engine.transform``); the rules live in ``rules/``, one per module, in the ordered list
``rules.RULES``. ``targets`` and ``warnings`` are the small records the tool shares with the engine.
Importing this package is cheap: the rules (and LibCST) load when ``RULES`` or the engine is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RULES", "RULE_NAMES"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from accelify.codemods import rules

        return getattr(rules, name)
    raise AttributeError(f"module 'accelify.codemods' has no attribute {name!r}")
