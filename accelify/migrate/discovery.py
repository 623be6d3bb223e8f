"""Which files of a folder a batch run looks at, found without parsing anything.

One walk of the tree gives every file an ``Entry``:

- ``candidate``: a ``*.py`` or ``*.ipynb`` file that may import torch (``source.might_import_torch`` on
  its bytes, no parse): the conversion decides;
- ``other``: any other file, copied as it is by ``migrate --out`` (a ``*.py`` that does not import
  torch, a data file, a README);
- ``skipped``: a ``*.py``/``*.ipynb`` file that is not read, with the reason (larger than the limit,
  empty, a broken link, a link loop, a link to a file outside the tree): a row of the report, the
  file untouched.

Symbolic links (``Entry.link``) are never converted through: a link to a file in the tree is
converted once, as that file; ``--out`` recreates every link as a link.

Files in hidden folders (``.github/``) are listed but never converted. Not walked: what ``.gitignore`` files ignore (the repository's own, every nested one, and
``.git/info/exclude``; matched by ``pathspec`` exactly as git does, negations included), the
version-control folders, virtual environments and build output (``SKIPPED_DIRS``). Excluded by
``[tool.accelify] exclude``/``extend-exclude`` or ``--exclude``: files that are never converted but
are still part of the tree (``--out`` copies them).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pathspec

from accelify.settings import Settings
from accelify.source import might_import_torch

CANDIDATE, OTHER, SKIP = "candidate", "other", "skipped"
SUFFIXES = (".py", ".ipynb")
MAX_SCRIPT_BYTES = 20 * 1024 * 1024  # larger is not a training script: skipped with a note
MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024  # notebooks carry their outputs (images): a bigger limit
VCS_DIRS = frozenset({".git", ".hg", ".svn"})
SKIPPED_DIRS = VCS_DIRS | {".tox", ".nox", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".mypy_cache",
                           ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}


@dataclass(frozen=True)
class Entry:
    """A file of the walked tree: its path, its path relative to the root, what it is, and why it was
    skipped (``reason``) or whether it is excluded from conversion (``excluded``)."""

    path: Path
    relative: str
    kind: str
    reason: str | None = None
    excluded: bool = False
    link: bool = False


def size_limit(name: str) -> int:
    return MAX_NOTEBOOK_BYTES if name.endswith(".ipynb") else MAX_SCRIPT_BYTES


def repository_root(folder: Path) -> Path | None:
    """The work tree of the git repository ``folder`` is in (the folder holding ``.git``), if any."""
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


class GitIgnore:
    """The ignore rules of a git work tree: the ``.gitignore`` of each folder (patterns relative to
    it; a deeper file wins, as in git) and ``.git/info/exclude``."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self._specs: dict[Path, pathspec.GitIgnoreSpec | None] = {}
        info = top / ".git" / "info" / "exclude"
        self._info = self._load(info) if info.is_file() else None

    @staticmethod
    def _load(path: Path) -> pathspec.GitIgnoreSpec | None:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None

    def _spec(self, folder: Path) -> pathspec.GitIgnoreSpec | None:
        if folder not in self._specs:
            file = folder / ".gitignore"
            self._specs[folder] = self._load(file) if file.is_file() else None
        return self._specs[folder]

    def ignored(self, path: Path, *, folder: bool) -> bool:
        """Whether git ignores ``path`` (its parent folders are known not to be ignored)."""
        try:
            relative = path.relative_to(self.top)
        except ValueError:
            return False
        suffix = "/" if folder else ""
        parents = [self.top.joinpath(*relative.parts[:i]) for i in range(len(relative.parts))]
        for base in reversed(parents):  # the deepest .gitignore that has a say decides
            spec = self._spec(base)
            if spec is None:
                continue
            verdict = spec.check_file(path.relative_to(base).as_posix() + suffix).include
            if verdict is not None:
                return verdict
        if self._info is not None:
            return bool(self._info.check_file(relative.as_posix() + suffix).include)
        return False


def _is_candidate_text(path: Path, size: int) -> bool | str:
    """True/False from the cheap text test, or the reason the file is not read."""
    if size == 0:
        return "empty file"
    if size > size_limit(path.name):
        return f"larger than {size_limit(path.name) // (1024 * 1024)} MiB, not read (not a training script)"
    try:
        with open(path, "rb") as handle:
            return might_import_torch(handle.read())
    except OSError:
        return True  # unreadable: the conversion reports it as a failed file, with the reason


def walk(root: Path, settings_for: Callable[[Path], Settings]) -> Iterator[Entry]:
    """Every file under ``root`` as an ``Entry``, in sorted order, one folder at a time.

    ``settings_for(path)`` gives the settings that apply to a path (the nearest pyproject.toml):
    their excludes mark candidates as ``excluded`` and keep excluded folders out of the conversion."""
    root = Path(os.path.abspath(root))
    top = repository_root(root)
    ignore = GitIgnore(top) if top is not None else GitIgnore(root)
    yield from _walk(root, root, root.resolve(), ignore, settings_for, hidden=False)


def _walk(
    root: Path, folder: Path, real_root: Path, ignore: GitIgnore, settings_for: Callable[[Path], Settings],
    *, hidden: bool,
) -> Iterator[Entry]:
    """``hidden``: below a hidden folder (``.github/``): files listed (``--out`` copies them), never converted."""
    try:
        with os.scandir(folder) as scan:
            items = sorted(scan, key=lambda e: e.name)
    except OSError:
        return
    for item in items:
        path = Path(item.path)
        relative = path.relative_to(root).as_posix()
        try:
            is_link = item.is_symlink()
            is_dir = item.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            if item.name in SKIPPED_DIRS or ignore.ignored(path, folder=True):
                continue
            yield from _walk(root, path, real_root, ignore, settings_for, hidden=hidden or item.name.startswith("."))
            continue
        if ignore.ignored(path, folder=False):
            continue
        convertible = item.name.endswith(SUFFIXES) and not hidden
        if is_link:
            yield _link(path, relative, real_root, convertible)
            continue
        try:
            info = item.stat(follow_symlinks=False)
        except OSError:
            continue
        if not convertible or not stat.S_ISREG(info.st_mode):
            yield Entry(path, relative, OTHER)
            continue
        excluded = settings_for(path).is_excluded(path, base=root)
        verdict = _is_candidate_text(path, info.st_size)
        if isinstance(verdict, str):
            kind = OTHER if verdict == "empty file" and (item.name == "__init__.py" or excluded) else SKIP
            yield Entry(path, relative, kind, None if kind == OTHER else verdict, excluded)
        else:
            yield Entry(path, relative, CANDIDATE if verdict else OTHER, None, excluded)


def _link(path: Path, relative: str, root: Path, convertible: bool) -> Entry:
    """A symbolic link: kept as a link; one named like a script that cannot be followed into the tree is a
    skipped row."""
    if not convertible:
        return Entry(path, relative, OTHER, link=True)
    try:
        target = path.resolve(strict=True)
    except RuntimeError:
        return Entry(path, relative, SKIP, "a symbolic link loop", link=True)
    except OSError as error:
        reason = "a symbolic link loop" if error.errno == errno.ELOOP else "a broken symbolic link"
        return Entry(path, relative, SKIP, reason, link=True)
    try:
        target.relative_to(root)
    except ValueError:
        return Entry(path, relative, SKIP, f"a symbolic link to {target}, outside the tree: convert that file "
                     "where it is", link=True)
    return Entry(path, relative, OTHER, link=True)  # converted as its target


def candidates_in(folder: Path, settings_for: Callable[[Path], Settings]) -> list[Path]:
    """The candidate files under ``folder`` (minus excluded ones), sorted, as paths below ``folder`` as
    given: what ``convert DIR`` converts."""
    return [folder / e.relative for e in walk(folder, settings_for) if e.kind == CANDIDATE and not e.excluded]


def candidates(folder: Path, exclude: tuple[str, ...] = (), root: Path | None = None) -> list[Path]:
    """The ``*.py``/``*.ipynb`` files under ``folder`` that may import torch (``might_import_torch``),
    minus ``exclude`` patterns (relative to ``root`` and to ``folder``) and what ``.gitignore`` ignores,
    skipping hidden, virtual-environment and build folders; sorted: ``candidates_in`` with settings made of
    ``exclude`` alone. Converting one that does not import torch gives ``skipped``, as naming it would."""
    settings = Settings(exclude=tuple(exclude), root=root or folder)
    return candidates_in(folder, lambda path: settings)
