"""Debug mode's descriptor exchange through the process group's store, and exits announced to it.

Every debug-checked collective first exchanges a small descriptor per process (see :mod:`.debug`)
under ``accelify_debug/<n>/<rank>``, where ``n`` counts this process's exchanges. The store, not a
collective, carries it: processes that are in different collectives (or one in a plain
``torch.distributed`` call) can still compare notes instead of corrupting each other's data.

A process waiting there would otherwise learn that a peer left only at the process-group timeout
(30 minutes by default; without debug mode the backend notices in seconds). So:

* a waiting process publishes ``accelify_debug/waiting/<rank> = n``;
* a process that exits (the script ended, ``sys.exit``, an uncaught exception: anything that runs
  ``atexit``) counts itself in ``accelify_debug/exits``, writes ``accelify_debug/exited/<rank>``
  (with its last checked collective) and fills the descriptor each waiting process needs from it
  with that record, unless it is there already;
* before waiting, a process checks the count and the records, so an exit just before it started
  waiting is seen too (the store orders the steps: one side always sees the other's).

The waiting process then raises :class:`~.errors.ProcessMissingError` naming the process that left
and the collective it waits in, at once. A process that is *killed* runs no ``atexit``; the launcher
(torch elastic) sees it die and stops the others within its monitor interval, and names it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
from datetime import timedelta
from typing import Any

from .errors import ProcessMissingError

_PREFIX = "accelify_debug"
_EXITS = f"{_PREFIX}/exits"
# Per process: the store of the current group, this process's exchange counter, its last checked
# collective (op, site), and who announces this process's exit (pid, so a forked child re-registers).
_STATE: dict[str, Any] = {"store": None, "seq": 0, "last": None, "watch": None, "registered": None}


def _default_store() -> Any:
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except (ImportError, AttributeError, RuntimeError, ValueError):
        return None


def default_store() -> Any:
    """The store of the default process group (a ``PrefixStore`` over torchrun's ``TCPStore``), or None.

    Debug mode's exchange and the sentinels (:mod:`.sentinels`) talk through it: no collective, so
    processes never wait on each other in an order the script did not choose.
    """
    return _default_store()


def _key(seq: int, rank: int) -> str:
    return f"{_PREFIX}/{seq}/{rank}"


def watch_exits() -> None:
    """Announce this process's exit to the others' debug-checked collectives (see the module docstring).

    Call it once debug mode is on and the process group exists (``PartialState`` does); idempotent,
    a no-op with one process or without a store.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    store = _default_store()
    if store is None:
        return
    _STATE["watch"] = (store, dist.get_rank(), dist.get_world_size())
    if _STATE["registered"] != os.getpid():
        _STATE["registered"] = os.getpid()
        atexit.register(_announce_exit)


def _announce_exit() -> None:
    """At exit: record that this process left, and answer every process waiting for it."""
    if _STATE["watch"] is not None:
        announce_exit(*_STATE["watch"], last=_STATE["last"])


def announce_exit(store: Any, rank: int, world: int, last: tuple[str, str] | None = None) -> None:
    """Tell the other processes, through ``store``, that process ``rank`` left (``last``: its last checked collective)."""
    record = pickle.dumps({"exited": True, "last": last})
    with contextlib.suppress(Exception):  # the store may be gone with its host: nobody is left to tell
        store.set_timeout(timedelta(seconds=5))
        store.add(_EXITS, 1)
        store.set(f"{_PREFIX}/exited/{rank}", record)
        for other in range(world):
            waiting = f"{_PREFIX}/waiting/{other}"
            if other != rank and store.check([waiting]):
                store.compare_set(_key(int(store.get(waiting)), rank), "", record)  # only where still missing


def _left_before(store: Any, keys: list[str], rank: int) -> list[int]:
    """Processes that exited without writing their descriptor under ``keys`` (they never will)."""
    if store.add(_EXITS, 0) == 0:
        return []
    return [r for r, key in enumerate(keys)
            if r != rank and store.check([f"{_PREFIX}/exited/{r}"]) and not store.check([key])]


def _ranks(ranks: list[int]) -> str:
    return f"Process {ranks[0]}" if len(ranks) == 1 else f"Processes {', '.join(map(str, ranks))}"


def _left_error(left: list[int], records: dict[int, Any], descriptor: dict[str, Any], rank: int,
                world: int) -> ProcessMissingError:
    lasts = []
    for r in left:
        last = (records.get(r) or {}).get("last")
        done = f"its last checked collective was `{last[0]}` at {last[1]}" if last else "it ran no checked collective"
        lasts.append(f"  - Process {r}: {done}")
    arrived = [r for r in range(world) if r not in left]
    return ProcessMissingError(
        f"{_ranks(left)} exited while process {rank} waits for {'it' if len(left) == 1 else 'them'} in "
        f"`{descriptor['op']}` (called at {descriptor['site']}); {'it' if len(left) == 1 else 'they'} never "
        f"reached it.\n{chr(10).join(lasts)}\nProcesses in `{descriptor['op']}`: {', '.join(map(str, arrived))}.\n"
        "Every process must call the same collectives in the same order: look for a collective that only some "
        "processes call (e.g. inside `if accelerator.is_main_process:`) or a process that stops early "
        "(a `return`, `break` or `sys.exit`, or a shorter data loader)."
    )


def _missing_error(store: Any, keys: list[str], descriptor: dict[str, Any], rank: int, world: int, timeout: Any,
                   exc: Exception) -> ProcessMissingError:
    """The error for a wait that failed: a timeout (who never arrived), or a store that stopped answering."""
    import torch.distributed as dist

    if isinstance(exc, getattr(dist, "DistNetworkError", ())):
        return ProcessMissingError(
            f"Process {rank} lost the store that coordinates the processes while waiting in `{descriptor['op']}` "
            f"(called at {descriptor['site']}): {exc}.\nIts host (the launcher, or process 0) has probably exited or "
            "died; look at that process's error."
        )
    missing = []
    for r, key in enumerate(keys):
        try:
            present = store.check([key])
        except Exception:  # the store itself is gone: report what we know
            present = r == rank
        if not present:
            missing.append(r)
    arrived = [r for r in range(world) if r not in missing]
    return ProcessMissingError(
        f"Process(es) {', '.join(map(str, missing)) or '?'} never reached `{descriptor['op']}` "
        f"(called by process {rank} at {descriptor['site']}) within the process-group timeout of {timeout}.\n"
        f"Processes that arrived: {', '.join(map(str, arrived))}.\n"
        "A process that never arrives is stuck, or skipped this collective (e.g. inside "
        "`if accelerator.is_main_process:`). Raise the timeout with InitProcessGroupKwargs(timeout=...) "
        "if it is only slow."
    )


def store_available() -> bool:
    """Whether the default process group has a store to exchange through."""
    return _default_store() is not None


def exchange(descriptor: dict[str, Any], rank: int, world: int) -> list[dict[str, Any]]:
    """Every process's ``descriptor`` for this collective, in rank order; raises when a process left or never came."""
    store = _default_store()
    if _STATE["store"] is not store:
        _STATE["store"], _STATE["seq"] = store, 0
    if _STATE["watch"] is None or _STATE["watch"][0] is not store:
        watch_exits()  # a group made after debug mode was turned on
    seq = _STATE["seq"] = _STATE["seq"] + 1
    _STATE["last"] = (descriptor["op"], descriptor["site"])
    keys = [_key(seq, r) for r in range(world)]
    store.set(keys[rank], pickle.dumps(descriptor))
    store.set(f"{_PREFIX}/waiting/{rank}", str(seq))
    left = _left_before(store, keys, rank)
    if left:
        records = {r: pickle.loads(store.get(f"{_PREFIX}/exited/{r}")) for r in left}
        raise _left_error(left, records, descriptor, rank, world)
    timeout = getattr(store, "timeout", None) or timedelta(minutes=30)
    try:
        store.wait(keys, timeout)
    except Exception as exc:  # the store raises its own timeout/connection errors
        raise _missing_error(store, keys, descriptor, rank, world, timeout, exc) from exc
    descriptors = [pickle.loads(store.get(key)) for key in keys]
    left = [r for r, d in enumerate(descriptors) if d.get("exited")]
    if left:
        raise _left_error(left, dict(enumerate(descriptors)), descriptor, rank, world)
    if seq > 1:  # every process has read the previous round once it wrote this one
        with contextlib.suppress(Exception):
            store.delete_key(_key(seq - 1, rank))
    return descriptors
