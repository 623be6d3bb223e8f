"""The conversion targets: the one table of which library the converted script imports ``Accelerator`` from.

Only the import line differs between targets (``--target``, ``[tool.accelify] target``).
"""

from __future__ import annotations

TARGETS: dict[str, str] = {"accelify": "accelify.runtime", "accelerate": "accelerate"}
TARGET_NAMES: tuple[str, ...] = tuple(TARGETS)
DEFAULT_TARGET = "accelify"


def import_module(target: str) -> str:
    """The module ``Accelerator`` is imported from for ``target`` (``KeyError`` for an unknown one)."""
    return TARGETS[target]
