"""``accelify convert PATH...``: show, check or write the conversion of training scripts.

Thin on purpose: collect the files, call ``accelify.pipeline.convert_path``, plan the writes with
``accelify.writes.plan_writes`` (as ``migrate`` does: a script whose writes conflict fails alone), write with
``accelify.source.write_together``, render with ``accelify.console``. Exit codes: 0 clean; 1 when a
file needs attention (refused: converting it would train wrongly; ``--exit-zero`` opts out) or, with
``--check``, when a file would change or a file converted before still has problems left to the user (its
warnings: checking it again re-runs the rules' checks); 2 when a file could not be read or parsed (the others still are).

A directory argument converts the candidate ``*.py``/``*.ipynb`` files in it (those that import torch),
minus what ``.gitignore`` ignores and the ``[tool.accelify] exclude`` patterns; ``accelify migrate``
does the same in parallel with a report. Each file gets the settings of its nearest ``pyproject.toml``;
``--force-exclude`` applies the excludes to files named explicitly too (the pre-commit hooks use it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import click

from accelify import console as view
from accelify.cli.exit_codes import INTERRUPTED, fail
from accelify.errors import AccelifyError
from accelify.pipeline import convert_path
from accelify.results import Result
from accelify.codemods.engine.outcome import NOT_A_CANDIDATE
from accelify.codemods.engine.targets import TARGET_NAMES
from accelify.migrate.discovery import candidates_in
from accelify.settings import SettingsFinder
from accelify.source import write_together
from accelify.writes import Destination, copy_root, plan_writes, program_copies, program_modules


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--diff", "show_diff", is_flag=True, help="Print the unified diff and write nothing (the default).")
@click.option("--in-place", "-i", is_flag=True, help="Rewrite the files (atomically).")
@click.option("-o", "--output", "output_arg", type=click.Path(), help="Write here instead: a file, or a folder (a trailing `/`, or several inputs).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a file would change, or a converted file still has warnings (for pre-commit).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of diffs.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when a file needs attention (it is still reported).")
@click.option("--target", type=click.Choice(TARGET_NAMES), default=None, help="Import Accelerator from accelify.runtime (default) or accelerate.")
@click.option("--force-exclude", is_flag=True, help="Apply the settings' exclude patterns to files named explicitly too.")
@click.option("--quiet", "-q", is_flag=True, help="Only warnings and errors (and the diffs with --diff; with --check, the files that would change).")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks for internal errors.")
def convert(
    paths: tuple[Path, ...],
    show_diff: bool,
    in_place: bool,
    output_arg: str | None,
    check: bool,
    as_json: bool,
    exit_zero: bool,
    target: str | None,
    force_exclude: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    """Convert single-device PyTorch training scripts to distributed-ready ones."""
    output = Path(output_arg) if output_arg is not None else None
    if in_place and output is not None:
        raise click.UsageError("--in-place and -o/--output are exclusive: write over the inputs, or elsewhere.")
    if (show_diff or check) and (in_place or output is not None):
        raise click.UsageError("--diff and --check only preview: drop --in-place/-o, or drop the preview flag.")
    out = view.make_console()
    err = view.make_console(stderr=True)
    writing = in_place or output is not None
    results: list[Result] = []
    written: list[tuple[Result, str]] = []
    try:
        settings_for = SettingsFinder(target=target)
        jobs = _expand(paths, settings_for, force_exclude, programs=not writing)
        single = len(paths) == 1 and not paths[0].is_dir() and not output_is_folder(output_arg)

        destinations: dict[str, Destination] = {}
        hints: list[str] = []  # how to run a copy whose imports start above the script's folder

        def converted() -> Iterator[tuple[Result, Destination]]:
            for path, relative, named in jobs:  # one script at a time: an interrupt leaves whole files only
                settings = settings_for(path)
                result = settings.filter(convert_path(path, target=settings.target, disabled=settings.disable))
                if not named and result.reason == NOT_A_CANDIDATE:
                    continue  # found in a folder, and not a candidate after all: not something the user asked for
                if output is not None and not single and named and len(paths) == 1:
                    # one program to a folder: mirrored from the folder its imports resolve from (``pygcn/train.py``
                    # with ``from pygcn.utils import ...`` goes to OUT/pygcn/train.py, beside OUT/pygcn/utils.py)
                    relative = path.resolve().relative_to(copy_root(path, program_modules(result)))
                    hint = how_to_run(path, relative, output)
                    if hint is not None:
                        hints.append(hint)
                destinations[result.path] = _destination(path, relative, output=output, single=single)
                yield result, destinations[result.path]

        copied: set[str] = set()
        for planned in plan_writes(converted()):
            result = planned.result
            results.append(result)
            if writing and planned.files:
                files = [(w.destination, w.data) for w in planned.files]
                if output is not None and not single:  # a runnable copy: the modules it imports, changed or not
                    files += program_copies(result, destinations[result.path], copied | _resolved(files))
                write_together(files)
                copied |= _resolved(files)
                written.extend((w.part, w.destination) for w in planned.files)
            elif quiet and check and not as_json:
                for part in (result, *result.companions):
                    if part.changed:
                        out.print(f"would convert: {part.path}", markup=False)
                    elif part.problems_left:
                        out.print(f"problems left: {part.path}", markup=False)
            elif not (writing or as_json or (quiet and not show_diff)):
                view.print_diff(out, result)
                for companion in result.companions:
                    view.print_diff(out, companion)
    except AccelifyError as error:
        fail(error, verbose=verbose)
    except KeyboardInterrupt:
        view.print_interrupted(err, written)
        sys.exit(INTERRUPTED)
    view.print_notes(err, settings_for.notes)
    if as_json:
        view.print_json(sys.stdout, results)
    else:
        view.print_warnings(err, results)
        if not quiet:
            view.print_written(out, written)
            if written:
                for hint in hints:
                    out.print(hint, markup=False)
            view.print_skipped(err, results)
        view.print_errors(err, results, verbose=verbose)
        if not results and all(p.is_dir() for p in paths):
            if not quiet:
                err.print(f"No Python files or notebooks that import torch found under {', '.join(map(str, paths))}",
                          markup=False)
        elif not quiet:
            view.print_summary(err, results, would=not writing)
    if any(r.failed for r in results):
        sys.exit(2)
    if (check and any(r.changed or r.problems_left for r in results)) or (
        not exit_zero and any(r.needs_attention for r in results)
    ):
        sys.exit(1)


def _expand(paths: tuple[Path, ...], settings_for: SettingsFinder, force_exclude: bool,
            programs: bool = False) -> list[tuple[Path, Path, bool]]:
    """``(file, path relative to the output, named explicitly)`` for every file to convert; folders give
    their candidates; with ``force_exclude`` an excluded file named explicitly is left out. With ``programs`` (a
    preview or a check), a module named alone is checked with the scripts beside it that import it: staging
    ``engine.py`` alone must not pass when ``train.py``'s conversion would change it. A script with its own
    ``__main__`` block is a program of its own, previewed as ``--in-place`` converts it: a notebook beside it that
    imports it for its classes does not make it that notebook's module (the preview said "unchanged")."""
    from accelify.migrate.grouping import entries_using, plan, runs_as_script

    jobs: list[tuple[Path, Path, bool]] = []
    for path in paths:
        if path.is_dir():
            for found in candidates_in(path, settings_for):
                jobs.append((found, Path(path.resolve().name) / found.relative_to(path), False))
        elif not (force_exclude and settings_for(path).is_excluded(path)):
            jobs.append((path, Path(path.name), True))
    if programs:
        given = {p.resolve() for p, _, _ in jobs}
        for path, _, named in list(jobs):
            if named and path.suffix == ".py" and path.is_file() and not runs_as_script(path):
                for entry in entries_using(path):
                    if entry.resolve() not in given and not settings_for(entry).is_excluded(entry):
                        given.add(entry.resolve())
                        jobs.append((entry, Path(entry.name), True))
    # a local module of another script given (pre-commit names every staged file) is converted with it

    scripts = {Path(t.path).resolve() for job in plan([p for p, _, _ in jobs if p.is_file()], settings_for) for t in job.tasks}
    return [job for job in jobs if not job[0].is_file() or job[0].resolve() in scripts]


def _destination(path: Path, relative: Path, *, output: Path | None, single: bool) -> Destination:
    """Where each part of ``path``'s result goes: with ``-o``, the script to the one output file when ``single``,
    else into a folder mirroring the inputs, and its changed local modules beside it as they are beside the
    script; else (``--in-place``, or a preview, which writes nothing but shows the same conflicts) every changed
    part over itself."""
    if output is None:
        return lambda part: part.path if part.changed else None
    target = output if single else output / relative
    script = str(path)

    def where(part: Result) -> Path:
        if part.path == script:
            return target
        module = os.path.abspath(part.path)
        placed = Path(os.path.normpath(target.parent / os.path.relpath(module, os.path.abspath(path.parent))))
        if placed.is_relative_to(output):  # in its place relative to the script, as the copy's layout mirrors
            return placed
        # above the output folder: a module the script imports from a folder above the one mirrored (several inputs)
        inner = Path(os.path.relpath(module, os.path.commonpath([module, os.path.abspath(path.parent)])))
        return target.parent / inner

    return where


def how_to_run(path: Path, relative: Path, output: Path) -> str | None:
    """How to run a copy written under ``output`` at ``relative`` whose imports start above the script's folder: a
    package's script as a module from ``output`` (``python -m tools.train``, as ``tools/__init__.py`` asks), a script
    in a plain subfolder with ``output`` on the path (as its installed project had its root); None when it runs as
    ``python OUT/train.py``."""
    if len(relative.parts) < 2:
        return None
    if (path.parent / "__init__.py").is_file():
        module = ".".join(relative.with_suffix("").parts)
        return f"run it from {output}: python -m {module} (or accelify launch -m {module})"
    return f"run it with {output} on the path (its imports start there): PYTHONPATH={output} python {output / relative}"


def _resolved(files: list[tuple[str, bytes]]) -> set[str]:
    import os

    return {os.path.realpath(where) for where, _ in files}


def output_is_folder(output: str | None) -> bool:
    """``-o`` names a folder: an existing one, or a path written with a trailing separator."""
    return output is not None and (Path(output).is_dir() or output.endswith(("/", "\\")))
