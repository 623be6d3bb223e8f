"""``accelify migrate DIR``: convert every training script of a repository, in parallel, with a report.

Thin on purpose: parse the flags, run ``accelify.migrate.Migration`` (walk, plan, convert in worker
processes, write), draw the progress bar and the summary with ``accelify.console``, write the
reports with ``accelify.migrate.report``. Exit codes as ``convert``: 0 clean; 1 when a file needs attention
(``--exit-zero`` opts out) or, with ``--check``, when a file would change; 2 when a file failed
(the others are still converted); 130 after Ctrl-C.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from accelify import console as view
from accelify.cli.exit_codes import INTERRUPTED, fail
from accelify.codemods.engine.targets import TARGET_NAMES
from accelify.errors import AccelifyError
from accelify.migrate.migration import CHECK, DIFF, IN_PLACE, OUT, PREVIEW, Interrupted, Migration, Options, Row, write_json
from accelify.migrate.workers import default_jobs
from accelify.results import Result


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--in-place", "-i", is_flag=True, help="Rewrite the converted files where they are (atomically).")
@click.option("--out", "out", type=click.Path(path_type=Path), help="Write a converted copy of the tree here (a new or empty folder).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Worker processes (default: the number of cores).")
@click.option("--report", "report", type=click.Path(dir_okay=False, path_type=Path), help="Write the results as JSON here.")
@click.option("--html", "html", type=click.Path(dir_okay=False, path_type=Path), help="Write a review page (side-by-side diffs, warnings) here.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Leave files matching this .gitignore-style pattern alone (repeatable).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a file would change.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the unified diffs; write nothing.")
@click.option("--target", type=click.Choice(TARGET_NAMES), default=None, help="Import Accelerator from accelify.runtime (default) or accelerate.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when a file needs attention (it is still reported).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, totals or written list: only warnings, errors and the files that need a look.")
@click.option("--verbose", "-v", is_flag=True, help="Show tracebacks for internal errors.")
def migrate(
    folder: Path,
    in_place: bool,
    out: Path | None,
    jobs: int | None,
    report: Path | None,
    html: Path | None,
    exclude: tuple[str, ...],
    check: bool,
    show_diff: bool,
    target: str | None,
    exit_zero: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    """Convert every PyTorch training script under FOLDER (.py and .ipynb files that import torch).

    Without --in-place or --out nothing is written: the summary shows what would change."""
    if in_place and out is not None:
        raise click.UsageError("--in-place and --out are exclusive: write over the files, or into a new folder.")
    if (check or show_diff) and (in_place or out is not None):
        raise click.UsageError("--diff and --check only preview: drop --in-place/--out, or drop the preview flag.")
    mode = IN_PLACE if in_place else OUT if out is not None else CHECK if check else DIFF if show_diff else PREVIEW
    workers = jobs or default_jobs()
    stdout = view.make_console()
    err = view.make_console(stderr=True)
    migration = Migration(Options(folder, mode, out, workers, target, exclude, shown=str(folder)))
    html_report = None
    if html is not None:
        from accelify.migrate.report import HtmlReport

        html_report = HtmlReport()
    try:
        total = migration.prepare()
        view.print_notes(err, migration.notes)
        with view.migrate_progress(err, 0 if quiet else total) as advance:

            def on_result(result: Result | None, rows: list[Row], count: int) -> None:
                advance(count, rows[0].path if rows else "")
                if result is None:
                    return
                if mode == DIFF:
                    for part in (result, *result.companions):
                        view.print_diff(stdout, part)
                if html_report is not None:
                    html_report.add(result)

            summary = migration.execute(on_result)
    except Interrupted as stop:
        view.print_migrate_written(err, stop.written, stop.copied, interrupted=True)
        sys.exit(INTERRUPTED)
    except KeyboardInterrupt:  # before anything was written (while walking)
        view.print_migrate_written(err, [], 0, interrupted=True)
        sys.exit(INTERRUPTED)
    except AccelifyError as error:
        fail(error, verbose=verbose)
    code = summary.exit_code(check=check, exit_zero=exit_zero)
    if (mode != DIFF or not summary.written) and not quiet:
        view.print_migrate_written(stdout, summary.written, summary.copied, interrupted=False)
    view.print_warnings_grouped(err, [_as_result(row) for row in summary.rows if row.warnings])
    if verbose:
        view.print_errors(err, [_as_result(row) for row in summary.rows if row.error], verbose=True)
    if total == 0 and not summary.rows:
        if not quiet:
            err.print(f"No Python files or notebooks that import torch found under {folder}", markup=False)
    else:
        view.print_migrate_summary(err, summary, would=mode not in (IN_PLACE, OUT), quiet=quiet)
    if mode == OUT and not quiet:
        err.print(f"{out}: {len(summary.written)} converted, {summary.copied} copied as they were", markup=False)
    command = "accelify migrate " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else f"accelify migrate {folder}"
    try:
        if report is not None:
            from accelify.migrate.report import payload

            write_json(report, payload(summary, root=str(folder), mode=mode, exit_code=code, jobs=workers))
            err.print(f"report: {report}", markup=False)
        if html_report is not None:
            html_report.write(html, summary, title=f"accelify migrate {folder}", command=command)
            err.print(f"review page: {html}", markup=False)
    except AccelifyError as error:
        fail(error, verbose=verbose)
    sys.exit(code)


def _as_result(row: Row) -> Result:
    """A row in the shape the shared printers take."""
    return Result(row.path, row.status, "", "", warnings=row.warnings, error=row.error, reason=row.reason)
