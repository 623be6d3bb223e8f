"""Exact mode of ``accelify verify``: the original's backward losses, read from its record as its run writes them.

Exact mode tells a loss summed over the batch's rows from a mean by comparing the processes' losses with the
original's at the same backward (``accelify_verify_sums.py``). The original's one-process run may still be running
(verify starts the N-process run while it runs, since the two need different cores at different moments): a loss
not recorded yet is waited for, as long as the original's process lives and has not ended its record (``exit``,
``stop`` or ``error``). Only the first backwards of each script line are asked for, so the wait is short: the
original, one process with no collectives, runs ahead of the N processes.

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

import glob
import json
import os
import time

POLL = 0.02  # seconds between two reads of a record that does not hold the asked loss yet
START_WAIT = 30.0  # seconds to wait for the original's record to appear (this run may start with it, or after it)
_ENDS = ('"event": "exit"', '"event": "stop"', '"event": "error"')


class ReferenceLosses:
    """The loss of each backward of the original's run, whose recorder writes ``<prefix>.rank0.pid<P>.jsonl``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.losses: list[float | None] = []
        self.done = not prefix  # the record is complete (or there is none): nothing more will come
        self._path: str | None = None
        self._offset = 0
        self._pid: int | None = None
        self._since = time.monotonic()

    def loss(self, n: int) -> float | None:
        """The loss of backward ``n`` (from 1), waiting for it while the original runs; None when it has none."""
        while len(self.losses) < n and not self.done:
            alive = self._alive()  # before reading: a process found dead has written everything it will
            self._read()
            if len(self.losses) >= n or self.done:
                break
            if not alive:
                self.done = True
                break
            time.sleep(POLL)
        return self.losses[n - 1] if 0 < n <= len(self.losses) else None

    def _alive(self) -> bool:
        if self._pid is None:  # no record yet (or no start line): alive until START_WAIT has passed
            return time.monotonic() - self._since < START_WAIT
        try:
            os.kill(self._pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def _read(self) -> None:
        if self._path is None:
            self._path = self._main_file()
            if self._path is None:
                return
        try:
            with open(self._path, "rb") as record:
                record.seek(self._offset)
                chunk = record.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1  # whole lines only: the last may still be being written
        self._offset += end
        for line in chunk[:end].decode("utf-8", errors="replace").splitlines():
            if '"event": "backward"' in line:
                try:
                    self.losses.append(json.loads(line).get("loss"))
                except ValueError:
                    self.done = True
                    return
            elif '"event": "start"' in line:
                try:
                    self._pid = int(json.loads(line)["pid"])
                except (ValueError, KeyError, TypeError):
                    pass
            elif any(end_mark in line for end_mark in _ENDS):
                self.done = True

    def _main_file(self) -> str | None:
        """The record of the original's own process: the first written (a subprocess it starts records later, and
        names the original as its parent)."""
        paths = glob.glob(self.prefix + ".rank0.pid*.jsonl")
        if len(paths) <= 1:
            return paths[0] if paths else None
        parents: dict[str, int] = {}
        for path in paths:
            try:
                with open(path, encoding="utf-8") as record:
                    start = json.loads(record.readline())
                parents[path] = int(start.get("ppid", 0))
            except (OSError, ValueError, TypeError):
                continue
        pids = {int(path.rsplit(".pid", 1)[1].split(".")[0]) for path in paths}
        roots = [path for path in paths if parents.get(path) not in pids]
        return (roots or sorted(paths))[0]
