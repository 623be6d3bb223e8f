"""``accelify migrate``: convert every training script of a folder, in parallel, each file written once.

The steps, each a function here (the CLI only parses flags, shows progress and renders):

1. ``discovery.walk`` lists the tree (``.gitignore`` honoured, excludes marked, candidates found by a
   text test, no parse);
2. ``plan`` groups the candidates: a cheap scan of each candidate's import lines finds the local
   modules it uses (``import data`` -> ``data.py`` beside it, as ``accelify.program`` finds them). A
   candidate that another candidate imports is not converted on its own: it is converted with the
   script(s) that import it, as their companion. Scripts that share a module are one job, so
   that the module is written once;
3. ``run`` converts the jobs in ``jobs`` worker processes (``convert_path``) and yields each job's
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
import multiprocessing
import os
import re
import shutil
import signal
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from accelify.codemods.outcome import ATTENTION, CONVERTED, FAILED, SKIPPED, UNCHANGED, ConversionWarning
from accelify.discovery import CANDIDATE, OTHER, SKIP, Entry, walk
from accelify.errors import AccelifyError, OutputError
from accelify.program import find_local
from accelify.results import Result
from accelify.settings import Settings, SettingsFinder
from accelify.source import encode, write_together

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
class Task:
    """One script to convert, with its settings (picklable: sent to a worker)."""

    path: str
    target: str
    disabled: frozenset[str]


@dataclass(frozen=True)
class Job:
    """Scripts converted together (they share local modules), and the candidate modules they take along."""

    tasks: tuple[Task, ...]
    modules: tuple[str, ...] = ()  # candidates converted as these scripts' companions, not on their own


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
        if (check and counts[CONVERTED]) or (counts[ATTENTION] and not exit_zero):
            return 1
        return 0


# -- planning ---------------------------------------------------------------------------------------

_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+\(?([^#\n]*)|import[ \t]+([^#\n]+))", re.M)


def scan_imports(text: str) -> list[str]:
    """The absolute module names a file's import lines name (``from a import b`` gives ``a`` and ``a.b``),
    found with a regular expression: a cheap over-approximation of ``program.imported_names``."""
    names: list[str] = []
    for base, members, plain in _IMPORT_LINE.findall(text):
        if base:
            names.append(base)
            names.extend(f"{base}.{n.split(' as ')[0].strip()}" for n in members.strip(" ()\\").split(",") if n.strip())
        else:
            names.extend(n.split(" as ")[0].strip() for n in plain.split(",") if n.strip())
    return [n for n in dict.fromkeys(names) if n and n.replace(".", "").replace("_", "").isalnum()]


def _code_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(data).get("cells", [])
            return "\n".join(
                "".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"
            )
        except (ValueError, AttributeError):
            return ""
    return data.decode("utf-8", errors="replace")


def local_closure(script: Path, cache: dict[Path, list[str]]) -> set[Path]:
    """The local modules ``script`` may use, directly or through each other (resolved paths)."""
    folder = script.parent
    found: set[Path] = set()
    pending = [script]
    while pending:
        current = pending.pop()
        if current not in cache:
            cache[current] = scan_imports(_code_text(current))
        for name in cache[current]:
            module = find_local(name, folder)
            if module is None:
                continue
            module = module.resolve()
            if module != script and module not in found:
                found.add(module)
                pending.append(module)
    return found


def plan(candidates: Sequence[Path], settings_for: Callable[[Path], Settings]) -> list[Job]:
    """Group the candidates into jobs: each script with the candidate modules it imports; scripts that
    share a module in one job; a candidate imported by another is converted only with it."""
    real = {p.resolve(): p for p in candidates}
    cache: dict[Path, list[str]] = {}
    uses = {r: local_closure(r, cache) for r in real}
    imported = {m for deps in uses.values() for m in deps if m in real}
    entries = [r for r in real if r not in imported]
    covered = set(entries).union(*(uses[e] for e in entries)) if entries else set()
    for r in sorted(real, key=str):  # files that only import each other in a cycle: the first one leads
        if r not in covered:
            entries.append(r)
            covered |= {r} | uses[r]
    # union-find over shared modules: scripts that share one are converted in one job
    parent = {e: e for e in entries}

    def root(x: Path) -> Path:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[Path, Path] = {}
    for entry in sorted(entries, key=str):
        for module in uses[entry]:
            if module in owner:
                parent[root(entry)] = root(owner[module])
            else:
                owner[module] = entry
    groups: dict[Path, list[Path]] = {}
    for entry in sorted(entries, key=str):
        groups.setdefault(root(entry), []).append(entry)
    jobs = []
    for members in groups.values():
        tasks = []
        for entry in members:
            settings = settings_for(real[entry])
            tasks.append(Task(str(real[entry]), settings.target, frozenset(settings.disable)))
        modules = sorted({str(real[m]) for e in members for m in uses[e] if m in real and m not in members}, key=str)
        jobs.append(Job(tuple(tasks), tuple(modules)))
    return sorted(jobs, key=lambda j: j.tasks[0].path)


# -- running ------------------------------------------------------------------------------------------


def convert_job(job: Job) -> list[Result]:
    """Convert a job's scripts, one after the other (in a worker process, or here)."""
    from accelify.pipeline import convert_path

    return [convert_path(task.path, target=task.target, disabled=task.disabled) for task in job.tasks]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


def _context() -> multiprocessing.context.BaseContext:
    """forkserver where there is one: workers fork from a clean process that has the conversion
    modules imported, not from this one (which may run a progress-bar thread)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["accelify.pipeline", "accelify.codemods.engine", "accelify.notebook"])
        return context
    return multiprocessing.get_context("spawn")


def start_workers_early() -> None:
    """Start the fork server now, so that it imports the conversion modules while the tree is walked
    (about half a second that would otherwise come before the first result)."""
    if _context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def run(jobs: Sequence[Job], workers: int) -> Iterator[tuple[Job, list[Result]]]:
    """Each job with its results, as soon as it is done (completion order). At most ``4 * workers``
    jobs are in flight, so results never pile up in memory."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield job, convert_job(job)
        return
    pool = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=_context(), initializer=_ignore_sigint)
    pending: dict[Future[list[Result]], Job] = {}
    queue = iter(jobs)
    try:
        for job in queue:
            pending[pool.submit(convert_job, job)] = job
            if len(pending) >= 4 * workers:
                break
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                job = pending.pop(future)
                for more in queue:
                    pending[pool.submit(convert_job, more)] = more
                    break
                yield job, _outcome(future, job)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _outcome(future: Future[list[Result]], job: Job) -> list[Result]:
    """A job's results; a worker that died (killed, out of memory) fails its scripts, not the run."""
    try:
        return future.result()
    except Exception as error:  # BrokenProcessPool, an unpicklable result...
        return [Result(t.path, FAILED, "", "", error=f"{t.path}: the worker converting it failed: "
                       f"{type(error).__name__}: {error}") for t in job.tasks]


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
        summary.rows.sort(key=lambda r: r.path)
        return summary

    # -- results ------------------------------------------------------------------------------------

    def _finish(self, job: Job, results: list[Result]) -> Iterator[tuple[Result | None, list[Row], int]]:
        """Each script's result with its rows (the script's, its companions') and how many candidates it
        accounts for, after writing them; then the job's candidate modules nothing changed."""
        results = [self._relabel(r, self.finder(Path(r.path))) for r in results]
        chosen: dict[str, tuple[str, str]] = {}  # companion path -> (new text, script that changed it)
        reported: set[str] = set()
        written: dict[str, str] = {}
        for result in results:
            conflict = next((
                c.path for c in result.companions if c.changed and c.path in chosen and chosen[c.path][0] != c.new
            ), None)
            if conflict is not None:
                other = chosen[conflict][1]
                result = replace(result, status=FAILED, new=result.old, companions=(), error=(
                    f"{result.path}: its conversion edits {conflict} differently from the conversion of {other}; "
                    f"convert them one at a time (`accelify convert {result.path}`)"))
            skip = set(chosen)  # written already, with an earlier script of this job
            for companion in result.companions:
                if companion.changed:
                    chosen.setdefault(companion.path, (companion.new, result.path))
            written.update(self._write(result, skip=skip))
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

    def _write(self, result: Result, *, skip: set[str]) -> dict[str, str]:
        """Write a script and its changed companions as one change (``--in-place``, ``--out``; a file
        not converted is copied to ``--out`` byte for byte); return ``{shown path: destination}``."""
        mode = self.options.mode
        if mode not in (IN_PLACE, OUT):
            return {}
        parts = [] if result.failed or result.needs_attention else [
            part for part in (result, *result.companions) if part.changed and part.path not in skip
        ]
        files: list[tuple[str, bytes]] = []
        destinations: dict[str, str] = {}
        for part in parts:
            source = self._absolute(part.path)
            destination = str(source) if mode == IN_PLACE else self._out_path(source)
            files.append((destination, encode(part.new, part.encoding)))
            destinations[part.path] = part.path if mode == IN_PLACE else destination
        with deferred_interrupt():
            if files:
                write_together(files)
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


def default_jobs() -> int:
    """The number of cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def write_json(path: str | os.PathLike[str], payload: object) -> None:
    """Write a JSON file atomically."""
    from accelify.source import write_atomic

    write_atomic(path, (json.dumps(payload, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def statuses(rows: Iterable[Row]) -> dict[str, int]:
    counts = Counter(r.status for r in rows)
    return {status: counts[status] for status in (CONVERTED, UNCHANGED, ATTENTION, SKIPPED, FAILED)}
