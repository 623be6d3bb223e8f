"""``accelify verify SCRIPT [-- ARGS]``: prove that a script's conversion trains like the original, and distributed.

Thin on purpose: parse, call :func:`accelify.verify.verify_script`, render with :mod:`accelify.console.verify`,
write the JSON report on request. Exit codes: 0 every check passed, 1 a check failed or could not be judged,
2 the tool could not start (unreadable script, unwritable report).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from accelify.errors import AccelifyError

CONTEXT = {"help_option_names": ["-h", "--help"]}
BATCHES, EPOCHS = 5, 2  # the default limit: 2 epochs of 5 batches (a per-epoch scheduler's second epoch, a "best")


@click.command(context_settings=CONTEXT)
@click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--converted", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Verify this converted script instead of converting SCRIPT.")
@click.option("--batches", type=click.IntRange(min=0), default=None,
              help=f"End every DataLoader epoch after this many batches (len(loader) says so too), so the script's "
                   f"own epoch-end code runs: validation, epoch averages, a per-epoch scheduler, the best checkpoint "
                   f"[default: {BATCHES}; 0: whole epochs].")
@click.option("--epochs", type=click.IntRange(min=0), default=None,
              help=f"With --batches: stop each run when its training loader starts this many + 1 epochs "
                   f"[default: {EPOCHS}; 0: the script's own epochs].")
@click.option("--steps", type=click.IntRange(min=0), default=None,
              help="Stop each run after this many optimizer steps, all optimizers counted. Alone, it replaces the "
                   "epoch limit: epochs run whole, and what the script does at an epoch's end is seen only if an "
                   "epoch ends within the steps (0: run the script to its end).")
@click.option("--processes", "-n", type=click.IntRange(min=2), default=2, show_default=True,
              help="CPU processes (Gloo) for the distributed run.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds each run may take; a run still going then is reported as a hang.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed set before each run starts.")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-5, show_default=True,
              help="Relative tolerance for losses and parameters (torch.allclose).")
@click.option("--atol", type=click.FloatRange(min=0), default=1e-7, show_default=True,
              help="Absolute tolerance for losses and parameters (torch.allclose).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report as JSON to this file.")
def verify(script: Path, script_args: tuple[str, ...], converted: Path | None, batches: int | None,
           epochs: int | None, steps: int | None, processes: int, timeout: float, seed: int, rtol: float, atol: float,
           report_path: Path | None) -> None:
    """Run SCRIPT and its conversion side by side, then the conversion on N processes, and judge them.

    On one process each (same seed), the losses and the parameters after every optimizer step must match; on
    N CPU processes the conversion must join one process group, train through DDP on sharded data, keep finite
    losses and equal parameters, and finish before --timeout; what process 0 prints, logs or returns after an
    epoch must equal the original's. Each run walks 2 epochs of 5 batches of every loader by default (--batches,
    --epochs), so the code at an epoch's end runs too. Arguments for the script go after `--`:

        accelify verify train.py --batches 3 -- --lr 0.1
    """
    from accelify.console import verify as verify_view
    from accelify.console import make_console
    from accelify.verify import VerifyOptions, verify_script, write_report

    steps, batches, epochs = _limits(steps, batches, epochs)
    options = VerifyOptions(steps=steps, processes=processes, timeout=timeout, args=script_args, seed=seed,
                            rtol=rtol, atol=atol, batches=batches, epochs=epochs)
    previous = signal.signal(signal.SIGTERM, _terminated)  # a `timeout` or a job scheduler ending verify
    try:
        report = verify_script(script, converted=converted, options=options)
        if report_path is not None:
            write_report(report, report_path)
    except AccelifyError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)
    except OSError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted: the runs verify had started were ended", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    verify_view.print_verify_report(make_console(), report)
    sys.exit(0 if report.passed else 1)


def _limits(steps: int | None, batches: int | None, epochs: int | None) -> tuple[int, int, int]:
    """(steps, batches, epochs) as asked: the epoch limit by default; --steps alone, the step limit alone (as before
    the epoch limit existed); --batches 0, no epoch limit."""
    if batches is None and epochs is None and steps is not None:
        return steps, 0, 0
    batches = BATCHES if batches is None else batches
    epochs = (EPOCHS if epochs is None else epochs) if batches else 0
    return steps or 0, batches, epochs


def _terminated(number: int, frame: object) -> None:
    """SIGTERM ends verify as Ctrl-C does, so that the runs it started (each in a session of its own) end with it."""
    raise KeyboardInterrupt
