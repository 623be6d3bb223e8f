"""When exact mode cannot run the script: a script that sizes state by the full batch.

Exact mode hands each of N processes ``b/N`` rows of the original's batch of ``b``. A script that sizes a tensor by
the batch size it was configured with (``hidden = model.init_hidden(batch_size)``, ``x.view(batch_size, -1)``,
``torch.zeros(batch_size, ...)``) then fails on a share, though a real launch (whole batches of ``b`` per process)
runs. Such a failure is not the conversion's: :func:`exact_blocked` recognises it (the N-process run ended with an
exception raised while a process held a share of a batch, and the converted script ran on one process), and
verification runs the conversion again on N processes as a real launch would, judges that run with the non-exact
checks, and skips the exact ones with the reason :func:`exact_blocked` gives. A conversion that is wrong in the same
place fails the normal run as well, so nothing wrong passes by this route.
"""

from __future__ import annotations

import re

from accelify.verify.runner import RunOutcome

_SIZE_WORDS = re.compile(r"shape|size|dimension|match|expected", re.IGNORECASE)


def exact_blocked(distributed: RunOutcome, control: RunOutcome) -> str | None:
    """Why the exact check could not run (the sentence for the skipped checks), or None when it could."""
    if distributed.ok or distributed.timed_out or not control.ok:
        return None
    failed = next((r for r in sorted(distributed.records, key=lambda r: r.rank)
                   if r.error is not None and r.error_share is not None), None)
    if failed is None:
        return None
    rows, lo, hi = failed.error_share
    n = distributed.spec.processes
    where = failed.error_site or "the script"
    error = failed.error if len(failed.error) <= 300 else failed.error[:297] + "..."
    by_size = str(rows) in re.findall(r"\d+", failed.error) or bool(_SIZE_WORDS.search(failed.error))
    what = (f"{where} sizes a tensor by the full batch (batch_size={rows}) while each process holds {hi - lo} rows"
            if by_size else f"{where} failed on a process's share of the batch ({hi - lo} of its {rows} rows)")
    return (f"the exact check could not run: {what} (process {failed.rank}: {error}); the normal {n}-process run was "
            "checked instead")
