"""``accelify migrate``: convert every training script of a folder, in parallel, each file written once.

The steps (the CLI only parses flags, shows progress and renders):

1. ``discovery.walk`` lists the tree (``.gitignore`` honoured, excludes marked, candidates found by a
   text test, no parse);
2. ``grouping.plan`` groups the candidates: each script with the candidate modules it imports (found by a
   scan of import lines), scripts that share a module in one job, so that the module is written once;
3. ``workers.run`` converts the jobs in ``jobs`` worker processes (``convert_path``) and yields each job's
   results as it finishes: the parent keeps only small ``Row`` records, so memory stays flat
   however many files there are;
4. the parent writes (``--in-place``: atomically, a script with its companions as one change;
   ``--out``: a mirror of the tree, other files copied byte for byte, links kept as links).

A Ctrl-C stops the run between two writes (a write in progress completes or leaves the old file)
and ``Interrupted`` lists what was already written. Nothing here prints or exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

from accelify.codemods.engine.outcome import ALREADY_CONVERTED, ATTENTION, CONVERTED, FAILED, SKIPPED, UNCHANGED, ConversionWarning
from accelify.migrate.discovery import CANDIDATE, OTHER, SKIP, Entry, walk
from accelify.errors import AccelifyError, OutputError
from accelify.migrate.grouping import Job, plan
from accelify.results import Result
from accelify.settings import Settings, SettingsFinder
from accelify.source import write_together
from accelify.writes import PlannedWrite, plan_writes
from accelify.migrate.workers import run, start_workers_early

PREVIEW, DIFF, CHECK, IN_PLACE, OUT = "preview", "diff", "check", "in-place", "out"
MODES = (PREVIEW, DIFF, CHECK, IN_PLACE, OUT)


class OutFolderError(AccelifyError):
    """``--out`` names a folder that already holds files."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: --out must name a folder that does not exist or is empty (it holds files); "
                         "choose another, or remove it")


class Interrupted(Exception):
    """Ctrl-C: the run stopped between two writes. ``written`` are the files written, each one whole."""

    def __init__(self, written: list[str], copied: int) -> None:
        self.written = written
        self.copied = copied
        super().__init__(f"interrupted after writing {len(written)} file(s)")


@dataclass(frozen=True)
class Row:
    """What the report and the table keep of one file (no source text)."""

    path: str
    status: str
    reason: str | None = None
    error: str | None = None
    changes: tuple[str, ...] = ()
    warnings: tuple[ConversionWarning, ...] = ()
    written: str | None = None
    companion_of: str | None = None

    @classmethod
    def of(cls, result: Result, *, companion_of: str | None = None, written: str | None = None) -> "Row":
        return cls(result.path, result.status, result.reason, result.error, result.changes, result.warnings,
                   written, companion_of)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "status": self.status,
            "reason": self.reason,
            "changes": list(self.changes),
            "warnings": [
                {"code": w.code, "line": w.line, "column": w.col, "message": w.message, "fix": w.fix, "path": w.path}
                for w in self.warnings
            ],
            "errors": [self.error] if self.error else [],
            "written_to": self.written,
            "companion_of": self.companion_of,
        }


@dataclass
class Summary:
    """The whole run: one row per file looked at, how many other files, and what was written."""

    rows: list[Row] = field(default_factory=list)
    not_candidates: int = 0
    excluded: int = 0
    copied: int = 0
    written: list[str] = field(default_factory=list)

    @property
    def counts(self) -> Counter[str]:
        return Counter(r.status for r in self.rows)

    def exit_code(self, *, check: bool, exit_zero: bool) -> int:
        counts = self.counts
        if counts[FAILED]:
            return 2
        problems_left = any(r.status == UNCHANGED and r.reason == ALREADY_CONVERTED and r.warnings for r in self.rows)
        if (check and (counts[CONVERTED] or problems_left)) or (counts[ATTENTION] and not exit_zero):
            return 1
        return 0


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold a Ctrl-C until the block ends (a group of files is written whole), then raise it."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


# -- the whole run --------------------------------------------------------------------------------------


@dataclass
class Options:
    """What ``migrate`` was asked to do. ``shown`` is the folder as the user spelled it (for paths)."""

    root: Path
    mode: str = PREVIEW
    out: Path | None = None
    jobs: int = 1
    target: str | None = None
    exclude: tuple[str, ...] = ()
    shown: str | None = None


def check_out_folder(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutFolderError(str(out))


class Migration:
    """One run: ``prepare()`` walks and plans, ``execute()`` converts and writes, calling
    ``on_result(result, rows, advance)`` for every script's result as it arrives (``advance``: how many
    candidates it accounts for; the CLI draws the progress bar, prints diffs and feeds the report from it)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.root = Path(os.path.abspath(options.root))
        self.finder = SettingsFinder(target=options.target, exclude=options.exclude, exclude_root=self.root)
        self.summary = Summary()
        self.entries: list[Entry] = []
        self.jobs: list[Job] = []
        self._show = options.shown if options.shown is not None else os.fspath(options.root)

    def shown(self, path: str | Path) -> str:
        """A path as the user would write it: below the folder they named, as they named it."""
        try:
            relative = Path(os.path.abspath(path)).relative_to(self.root)
        except ValueError:
            return os.fspath(path)
        return os.path.normpath(os.path.join(self._show, relative))

    def prepare(self) -> int:
        """Walk and plan; the number of candidate files (the progress bar's total)."""
        if self.options.mode == OUT:
            assert self.options.out is not None
            check_out_folder(self.options.out)
        if self.options.jobs > 1:
            start_workers_early()
        out = Path(os.path.abspath(self.options.out)) if self.options.out else None
        for entry in walk(self.root, self.finder):
            if out is not None and (entry.path == out or out in entry.path.parents):
                continue
            self.entries.append(entry)
        candidates = [e.path for e in self.entries if e.kind == CANDIDATE and not e.excluded]
        self.summary.not_candidates = sum(
            1 for e in self.entries if e.kind == OTHER and not e.link and e.path.suffix in (".py", ".ipynb")
        )
        self.jobs = plan(candidates, self.finder)
        return len(candidates)

    @property
    def notes(self) -> list[str]:
        return self.finder.notes

    def execute(self, on_result: Callable[[Result | None, list[Row], int], None] = lambda r, rows, n: None) -> Summary:
        """Convert and write; raises ``Interrupted`` on Ctrl-C (after the write in progress)."""
        summary = self.summary
        for entry in self.entries:
            if entry.kind == SKIP:
                summary.rows.append(Row(self.shown(entry.path), SKIPPED, reason=entry.reason))
            elif entry.kind == CANDIDATE and entry.excluded:
                summary.excluded += 1
        try:
            if self.options.mode == OUT:
                self._copy_others()
            for job, results in run(self.jobs, self.options.jobs):
                for result, rows, advance in self._finish(job, results):
                    summary.rows.extend(rows)
                    on_result(result, rows, advance)
        except KeyboardInterrupt:
            raise Interrupted(list(summary.written), summary.copied) from None
        except OSError as error:  # the --out tree cannot be made (a read-only or full file system, a file in the way)
            where = error.filename if isinstance(error.filename, str) else str(self.options.out)
            raise OutputError(where, f"{error.strerror or error}; the copy in --out is incomplete") from None
        summary.rows.sort(key=lambda r: r.path)
        return summary

    # -- results ------------------------------------------------------------------------------------

    def _finish(self, job: Job, results: list[Result]) -> Iterator[tuple[Result | None, list[Row], int]]:
        """Each script's result with its rows (the script's, its companions') and how many candidates it
        accounts for, after writing them; then the job's candidate modules nothing changed."""
        results = [self._relabel(r, self.finder(Path(r.path))) for r in results]
        reported: set[str] = set()
        written: dict[str, str] = {}
        for planned in plan_writes((r, self._destination) for r in results):
            result = planned.result
            written.update(self._write(planned))
            rows = [Row.of(result, written=written.get(result.path))]
            for companion in result.companions:
                if companion.path not in reported:
                    reported.add(companion.path)
                    rows.append(Row.of(companion, companion_of=result.path, written=written.get(companion.path)))
            yield result, rows, 1
        rows = []
        for module in job.modules:  # candidates analysed with the scripts
            path = self.shown(module)
            if self.options.mode == OUT and path not in written:
                with deferred_interrupt():
                    self._copy(Path(module))
                written[path] = self._out_path(Path(module))
            if path not in reported:
                rows.append(Row(path, UNCHANGED, reason=f"converted with {results[0].path}: nothing to change",
                                companion_of=results[0].path, written=written.get(path)))
        if job.modules:
            yield None, rows, len(job.modules)

    def _relabel(self, result: Result, settings: Settings) -> Result:
        """Paths as the user spelled the folder, and the warnings the settings show."""
        def fix(r: Result) -> Result:
            path = self.shown(r.path)
            warnings = tuple(replace(w, path=path + w.path[len(r.path):] if w.path.startswith(r.path) else w.path)
                             for w in r.warnings)
            error = r.error.replace(r.path, path, 1) if r.error else r.error
            return replace(r, path=path, warnings=warnings, error=error,
                           companions=tuple(fix(c) for c in r.companions))

        return fix(settings.filter(result))

    def _absolute(self, shown: str) -> Path:
        relative = os.path.relpath(shown, self._show) if self._show else shown
        return self.root / relative

    def _out_path(self, source: Path) -> str:
        assert self.options.out is not None
        return os.path.join(os.fspath(self.options.out), os.path.relpath(source, self.root))

    def _destination(self, part: Result) -> str | None:
        """Where a changed part of a result goes: over itself (``--in-place``, and the previews, which write nothing),
        or its place in the ``--out`` mirror."""
        if not part.changed:
            return None
        source = self._absolute(part.path)
        return self._out_path(source) if self.options.mode == OUT else str(source)

    def _write(self, planned: PlannedWrite) -> dict[str, str]:
        """Write a script and its changed companions as one change (``--in-place``, ``--out``; a file
        not converted is copied to ``--out`` byte for byte); return ``{shown path: destination}``."""
        mode = self.options.mode
        if mode not in (IN_PLACE, OUT):
            return {}
        result = planned.result
        destinations = {w.part.path: w.part.path if mode == IN_PLACE else w.destination for w in planned.files}
        with deferred_interrupt():
            if planned.files:
                write_together([(w.destination, w.data) for w in planned.files])
                self.summary.written.extend(destinations.values())
            if mode == OUT and result.path not in destinations:
                self._copy(self._absolute(result.path))  # not converted: the original, byte for byte
                destinations[result.path] = self._out_path(self._absolute(result.path))
        return destinations

    # -- the mirror ----------------------------------------------------------------------------------

    def _copy(self, source: Path) -> None:
        destination = Path(self._out_path(source))
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), destination)
        elif source.exists():
            tmp = destination.with_name(f".{destination.name}.accelify-copy")
            shutil.copy2(source, tmp)
            os.replace(tmp, destination)
        self.summary.copied += 1

    def _copy_others(self) -> None:
        """Everything the jobs do not write: other files byte for byte, links as links, skipped rows as they are."""
        assert self.options.out is not None
        Path(self.options.out).mkdir(parents=True, exist_ok=True)
        # candidates are written (or copied) when their job is done; a local module that is not a candidate
        # is copied now, and replaced by its conversion if a script's conversion changes it
        handled = {t.path for j in self.jobs for t in j.tasks} | {m for j in self.jobs for m in j.modules}
        for entry in self.entries:
            if str(entry.path) in handled:
                continue
            with deferred_interrupt():
                self._copy(entry.path)


def write_json(path: str | os.PathLike[str], payload: object) -> None:
    """Write a JSON file atomically."""
    from accelify.source import write_atomic

    write_atomic(path, (json.dumps(payload, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def statuses(rows: Iterable[Row]) -> dict[str, int]:
    counts = Counter(r.status for r in rows)
    return {status: counts[status] for status in (CONVERTED, UNCHANGED, ATTENTION, SKIPPED, FAILED)}
