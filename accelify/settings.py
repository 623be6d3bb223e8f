"""``[tool.accelify]`` in ``pyproject.toml``: the one settings module of ``convert`` and ``migrate``.

Example::

    [tool.accelify]
    target = "accelerate"            # or "accelify" (the default)
    exclude = ["legacy/", "notebooks/scratch_*.ipynb"]   # .gitignore-style patterns
    extend-exclude = ["generated/"]  # added to ``exclude`` (handy when a shared config sets ``exclude``)
    select = ["ACC0"]                # rules (by name) that run / warnings (by code or code prefix) shown
    ignore = ["progress", "ACC013"]  # rules (by name) that do not run / warnings (by code) not shown
    disable = ["print"]              # rule names that do not run (the older spelling of ``ignore``)

Each path gets the settings of the nearest ``pyproject.toml`` in its folder or a parent folder
(``SettingsFinder``); command-line flags win over the file (``Settings.with_flags``). Patterns are
``.gitignore`` patterns (matched with ``pathspec``), relative to the folder of the ``pyproject.toml``:
``legacy/`` excludes that folder wherever it is, ``scripts/old_*`` the matching files in ``scripts``.
An unknown key is reported (``Settings.notes``), not an error: a newer config read by an older
accelify still converts. A file refused as needing attention keeps its warnings whatever
``ignore`` says: they are the reason it was not converted.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from accelify.codemods.engine.targets import DEFAULT_TARGET, TARGET_NAMES
from accelify.errors import ConfigError

if TYPE_CHECKING:
    import pathspec

    from accelify.results import Result

KEYS = ("target", "exclude", "extend-exclude", "select", "ignore", "disable")


@dataclass(frozen=True)
class Settings:
    """The effective conversion settings; ``root`` is the folder of the pyproject.toml (for ``exclude``).

    ``disable`` is the set of rule names that do not run (``disable``, the rule names in ``ignore``,
    and every rule left out when ``select`` names rules); ``select_codes``/``ignore_codes`` filter
    the warnings shown. ``notes`` are messages about the file itself (unknown keys), for the CLI to show.
    """

    target: str = DEFAULT_TARGET
    exclude: tuple[str, ...] = ()
    disable: frozenset[str] = frozenset()
    root: Path | None = None
    source: str | None = None  # the file they came from
    extend_exclude: tuple[str, ...] = ()
    select_codes: tuple[str, ...] = ()
    ignore_codes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    flag_exclude: tuple[str, ...] = field(default=(), compare=False)  # --exclude patterns
    flag_root: Path | None = field(default=None, compare=False)  # what --exclude patterns are relative to

    def with_flags(
        self, *, target: str | None = None, exclude: Iterable[str] = (), exclude_root: Path | None = None
    ) -> "Settings":
        """These settings with the command-line flags that were given applied on top. ``exclude``
        patterns from the command line add to the file's, relative to ``exclude_root``."""
        out = replace(self, target=target) if target is not None else self
        extra = tuple(exclude)
        if extra:
            out = replace(out, flag_exclude=extra, flag_root=(exclude_root or Path(".")).resolve())
        return out

    @cached_property
    def _specs(self) -> tuple[tuple[Path, "pathspec.PathSpec"], ...]:
        import pathspec

        specs = []
        file_patterns = self.exclude + self.extend_exclude
        if file_patterns:
            specs.append(((self.root or Path(".")).resolve(), pathspec.GitIgnoreSpec.from_lines(file_patterns)))
        if self.flag_exclude:
            specs.append(((self.flag_root or Path(".")).resolve(), pathspec.GitIgnoreSpec.from_lines(self.flag_exclude)))
        return tuple(specs)

    def is_excluded(
        self, path: str | os.PathLike[str], *, folder: bool = False, base: str | os.PathLike[str] | None = None
    ) -> bool:
        """Whether ``path`` matches an ``exclude``/``extend-exclude`` pattern (relative to the folder of the
        pyproject.toml, or to ``base``: the folder the command was given) or a ``--exclude`` flag."""
        if not self._specs:
            return False
        absolute = Path(os.path.abspath(path))
        extra = Path(os.path.abspath(base if base is not None else ".")).resolve()
        for root, spec in self._specs:
            for start in dict.fromkeys((root, extra)):
                try:
                    relative = absolute.relative_to(start).as_posix()
                except ValueError:
                    try:
                        relative = absolute.resolve().relative_to(start).as_posix()
                    except ValueError:
                        continue
                if relative == "." or relative.startswith("../"):
                    continue
                if spec.match_file(relative + "/" if folder else relative):
                    return True
                # a file below an excluded folder is excluded (``legacy/`` excludes ``legacy/a/b.py``)
                parts = relative.split("/")[:-1]
                if any(spec.match_file("/".join(parts[: i + 1]) + "/") for i in range(len(parts))):
                    return True
        return False

    def shows(self, code: str) -> bool:
        """Whether a warning with ``code`` is shown (``select`` and ``ignore`` by code or code prefix)."""
        if self.select_codes and not code.startswith(self.select_codes):
            return False
        return not code.startswith(self.ignore_codes) if self.ignore_codes else True

    def filter(self, result: "Result") -> "Result":
        """``result`` with only the warnings these settings show (a refused file keeps all of them)."""
        if not (self.select_codes or self.ignore_codes) or result.needs_attention:
            return result
        return replace(
            result,
            warnings=tuple(w for w in result.warnings if self.shows(w.code)),
            companions=tuple(self.filter(c) for c in result.companions),
        )


def find_pyproject(start: str | os.PathLike[str]) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or a parent folder."""
    folder = Path(start).resolve()
    if folder.is_file() or not folder.exists():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def load_settings(start: str | os.PathLike[str] = ".") -> Settings:
    """Settings from the nearest ``pyproject.toml`` above ``start`` (defaults when there is none)."""
    path = find_pyproject(start)
    return Settings() if path is None else read_pyproject(path)


def read_pyproject(path: Path) -> Settings:
    """The ``[tool.accelify]`` settings of one ``pyproject.toml`` (defaults without the table)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as error:
        raise ConfigError(str(path), f"cannot be read: {error}") from None
    table = data.get("tool", {}).get("accelify")
    if table is None:
        return Settings(root=path.parent, source=str(path))
    return parse_table(table, str(path))


class SettingsFinder:
    """The settings of each path: its nearest ``pyproject.toml``, read once per file, with the
    command-line flags on top. ``notes`` collects every file's notes once (for the CLI to print)."""

    def __init__(self, *, target: str | None = None, exclude: Iterable[str] = (), exclude_root: Path | None = None) -> None:
        self._flags = {"target": target, "exclude": tuple(exclude), "exclude_root": exclude_root}
        self._by_folder: dict[Path, Settings] = {}
        self._by_file: dict[Path | None, Settings] = {}

    def __call__(self, path: str | os.PathLike[str]) -> Settings:
        folder = Path(os.path.abspath(path))
        if not folder.is_dir():
            folder = folder.parent
        found = self._by_folder.get(folder)
        if found is None:
            pyproject = find_pyproject(folder)
            found = self._by_file.get(pyproject)
            if found is None:
                base = Settings() if pyproject is None else read_pyproject(pyproject)
                found = self._by_file[pyproject] = base.with_flags(**self._flags)  # type: ignore[arg-type]
            self._by_folder[folder] = found
        return found

    @property
    def notes(self) -> list[str]:
        return [note for settings in self._by_file.values() for note in settings.notes]


def _strings(table: dict, key: str, source: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(source, f"{key} must be a list of strings")
    return value


def known_codes() -> set[str]:
    """Every warning code a conversion can report."""
    from accelify.codemods.codes import ALL

    return {code.code for code in ALL}


def parse_table(table: object, source: str) -> Settings:
    """Validate a ``[tool.accelify]`` table."""
    from accelify.codemods import RULE_NAMES

    if not isinstance(table, dict):
        raise ConfigError(source, "must be a table")
    notes = tuple(
        f"{source}: [tool.accelify] unknown key {key!r} ignored (known keys: {', '.join(KEYS)})"
        for key in sorted(set(table) - set(KEYS))
    )
    target = table.get("target", DEFAULT_TARGET)
    if target not in TARGET_NAMES:
        raise ConfigError(source, f"target = {target!r}: use one of {', '.join(TARGET_NAMES)}")
    exclude, extend, select, ignore, disable = (
        _strings(table, key, source) for key in ("exclude", "extend-exclude", "select", "ignore", "disable")
    )
    bad = sorted(set(disable) - set(RULE_NAMES))
    if bad:
        raise ConfigError(source, f"disable names unknown rule(s) {', '.join(bad)}; rules: {', '.join(RULE_NAMES)}")
    codes = known_codes()

    def split(key: str, values: list[str]) -> tuple[set[str], tuple[str, ...]]:
        names = {v for v in values if v in RULE_NAMES}
        prefixes = tuple(v.upper() for v in values if v not in RULE_NAMES)
        bad = [p for p in prefixes if not any(code.startswith(p) for code in codes)]
        if bad:
            raise ConfigError(
                source, f"{key} names unknown rule(s) or code(s) {', '.join(bad)}; rules: {', '.join(RULE_NAMES)}; "
                f"codes: {', '.join(sorted(codes))}"
            )
        return names, prefixes

    select_names, select_codes = split("select", select)
    ignore_names, ignore_codes = split("ignore", ignore)
    off = set(disable) | ignore_names
    if select_names:
        off |= set(RULE_NAMES) - select_names
    return Settings(
        target, tuple(exclude), frozenset(off), Path(source).parent, source,
        extend_exclude=tuple(extend), select_codes=select_codes, ignore_codes=ignore_codes, notes=notes,
    )
