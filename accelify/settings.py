"""``[tool.accelify]`` in ``pyproject.toml``: the conversion target, excluded globs and disabled rules.

Example::

    [tool.accelify]
    target = "accelerate"          # or "accelify" (the default)
    exclude = ["legacy/*", "notebooks/**"]
    disable = ["print", "progress"]  # rule names, see ``accelify.codemods.RULE_NAMES``

Command-line flags win over the file.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from accelify.codemods.targets import DEFAULT_TARGET, TARGET_NAMES
from accelify.errors import ConfigError

KEYS = ("target", "exclude", "disable")


@dataclass(frozen=True)
class Settings:
    """The effective conversion settings; ``root`` is the folder of the pyproject.toml (for ``exclude``)."""

    target: str = DEFAULT_TARGET
    exclude: tuple[str, ...] = ()
    disable: frozenset[str] = frozenset()
    root: Path | None = None
    source: str | None = None  # the file they came from

    def with_flags(self, *, target: str | None = None) -> "Settings":
        """These settings with the command-line flags that were given applied on top."""
        return replace(self, target=target) if target is not None else self


def find_pyproject(start: str | os.PathLike[str]) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or a parent folder."""
    folder = Path(start).resolve()
    if folder.is_file():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def load_settings(start: str | os.PathLike[str] = ".") -> Settings:
    """Settings from the nearest ``pyproject.toml`` above ``start`` (defaults when there is none)."""
    path = find_pyproject(start)
    if path is None:
        return Settings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(str(path), f"cannot be read: {error}") from None
    table = data.get("tool", {}).get("accelify", {})
    return parse_table(table, str(path))


def parse_table(table: object, source: str) -> Settings:
    """Validate a ``[tool.accelify]`` table."""
    from accelify.codemods import RULE_NAMES

    if not isinstance(table, dict):
        raise ConfigError(source, "must be a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(source, f"unknown key(s) {', '.join(unknown)}; known keys: {', '.join(KEYS)}")
    target = table.get("target", DEFAULT_TARGET)
    if target not in TARGET_NAMES:
        raise ConfigError(source, f"target = {target!r}: use one of {', '.join(TARGET_NAMES)}")
    exclude = table.get("exclude", [])
    disable = table.get("disable", [])
    for key, value in (("exclude", exclude), ("disable", disable)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(source, f"{key} must be a list of strings")
    bad = sorted(set(disable) - set(RULE_NAMES))
    if bad:
        raise ConfigError(source, f"disable names unknown rule(s) {', '.join(bad)}; rules: {', '.join(RULE_NAMES)}")
    return Settings(target, tuple(exclude), frozenset(disable), Path(source).parent, source)
