"""Exact mode of ``accelify verify``: ``gather_for_metrics`` drops the rows exact mode padded a batch's shares with.

Exact mode prepares each loader as for one process and gives process ``r`` rows ``[r*p, (r+1)*p)`` of every batch
of ``b`` rows, ``p = ceil(b/N)``, wrapping around to the batch's first rows when ``N*p > b``
(``accelify_verify_exact.py``). The runtime's ``gather_for_metrics`` drops the samples duplicated to even out the last
batch only for a loader it sharded itself, so in exact mode it returned the ``N*p`` gathered rows, duplicates
included: an evaluation over 25 samples in batches of 10 on 2 processes summed 26 rows, and a right conversion
printed another value than the original. A real launch drops its duplicates there, and prints the original's value.

Gathered in process order, the shares hold the batch's rows in order, then the wrapped-around ones: so a gathered
tensor (or a gathered list of objects) of ``N*p`` rows keeps its first ``b``. What is gathered with another first
dimension (one value per process: a batch's mean loss) is kept whole, as the runtime keeps it. ``gather`` (not for
metrics) keeps every row, as it does in a real launch.

``gather`` of a share of a padded batch is recorded (a ``padded_gather`` event: the script's line, the batch's rows,
the rows gathered, the steps so far; once per line): where the script gathers per-sample values with ``gather``
inside a loop over a loader whose last batch does not split evenly, it counts the duplicated rows in a real launch
too, and ``printed.py`` names that as the cause of a printed value that differs.

Like the recorder, this module imports nothing of accelify at import time.
"""

from __future__ import annotations

import functools
import sys
import threading
from types import ModuleType
from typing import Any


def patch_gather_for_metrics(ops: ModuleType, exact: Any) -> None:
    """``accelify.runtime.ops.gather_for_metrics`` keeps the real rows of the batch this process holds a share of;
    ``gather`` of such a share's padded rows is recorded (see the module docstring)."""
    gather_for_metrics, gather = ops.gather_for_metrics, ops.gather
    if getattr(gather_for_metrics, "_accelify_verify_gathered", False):
        return
    inside = threading.local()  # gather_for_metrics gathers through ops.gather: not the script's own gather
    sites: set[str] = set()

    @functools.wraps(gather_for_metrics)
    def real_rows(input_data: Any, *args: Any, **kwargs: Any) -> Any:
        inside.on = True
        try:
            gathered = gather_for_metrics(input_data, *args, **kwargs)
        finally:
            inside.on = False
        padded = _padded(exact)
        return gathered if padded is None else trim(gathered, padded[0], padded[1], exact.recorder.torch)

    @functools.wraps(gather)
    def recorded_gather(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        gathered = gather(tensor, *args, **kwargs)
        padded = None if getattr(inside, "on", False) else _padded(exact)
        if padded is not None and _leading(gathered, padded[0], exact.recorder.torch):
            recorder = exact.recorder
            site = recorder._site(sys._getframe(1))
            if site not in sites:
                sites.add(site)
                recorder.write({"event": "padded_gather", "site": site, "rows": padded[1], "gathered": padded[0],
                                "steps": recorder.steps})
        return gathered

    real_rows._accelify_verify_gathered = True  # type: ignore[attr-defined]
    ops.gather_for_metrics = real_rows
    ops.gather = recorded_gather


def _padded(exact: Any) -> tuple[int, int] | None:
    """(rows gathered, rows of the batch) when this process holds a share of a batch padded to split evenly."""
    share, world = exact.share, exact.world_size()
    if share is None or world < 2:
        return None
    rows, lo, hi = share
    padded = (hi - lo) * world
    return (padded, rows) if padded > rows else None


def _leading(data: Any, size: int, torch: ModuleType, depth: int = 0) -> bool:
    """Some tensor in ``data`` has ``size`` rows."""
    if isinstance(data, torch.Tensor):
        return data.dim() > 0 and data.shape[0] == size
    if depth > 6:
        return False
    items = data.values() if isinstance(data, dict) else data if isinstance(data, (list, tuple)) else ()
    return any(_leading(v, size, torch, depth + 1) for v in items)


def trim(data: Any, padded: int, rows: int, torch: ModuleType, depth: int = 0) -> Any:
    """``data`` with every tensor or list of ``padded`` leading entries cut to its first ``rows`` (nested in tuples,
    lists and dicts); anything else as it is."""
    if isinstance(data, torch.Tensor):
        return data[:rows] if data.dim() > 0 and data.shape[0] == padded else data
    if depth > 6:
        return data
    if isinstance(data, list) and len(data) == padded and not any(isinstance(v, torch.Tensor) for v in data):
        return data[:rows]  # gather_object's list of per-sample objects
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*[trim(v, padded, rows, torch, depth + 1) for v in data])
    if isinstance(data, (list, tuple)):
        return type(data)(trim(v, padded, rows, torch, depth + 1) for v in data)
    if isinstance(data, dict):
        try:
            return type(data)({k: trim(v, padded, rows, torch, depth + 1) for k, v in data.items()})
        except TypeError:
            return {k: trim(v, padded, rows, torch, depth + 1) for k, v in data.items()}
    return data
