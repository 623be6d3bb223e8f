"""Exact mode reads the original's losses while the original still runs (``accelify_verify_reference``): a loss not
written yet is waited for while the original lives, and given up when its record ended or its process is gone."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from accelify.verify.hook import accelify_verify_reference as reference


def _line(event: str, **fields: object) -> str:
    return json.dumps({"event": event, **fields}) + "\n"


def test_a_loss_not_written_yet_is_waited_for(tmp_path: Path) -> None:
    prefix = tmp_path / "record"
    path = Path(f"{prefix}.rank0.pid{os.getpid()}.jsonl")
    path.write_text(_line("start", pid=os.getpid(), ppid=1) + _line("backward", n=1, loss=0.5), encoding="utf-8")

    def later() -> None:
        time.sleep(0.3)
        with open(path, "a", encoding="utf-8") as record:
            record.write('{"event": "backward", "n": 2, ')  # half a line: not read until it ends
            record.flush()
            time.sleep(0.1)
            record.write('"loss": 0.25}\n')

    writer = threading.Thread(target=later)
    writer.start()
    losses = reference.ReferenceLosses(str(prefix))
    assert losses.loss(1) == 0.5 and len(losses.losses) == 1
    start = time.monotonic()
    assert losses.loss(2) == 0.25
    assert time.monotonic() - start >= 0.3
    writer.join()


def test_an_ended_record_or_a_gone_process_has_no_more_losses(tmp_path: Path) -> None:
    ended = tmp_path / "ended"
    Path(f"{ended}.rank0.pid{os.getpid()}.jsonl").write_text(
        _line("start", pid=os.getpid(), ppid=1) + _line("backward", n=1, loss=1.0) + _line("exit"), encoding="utf-8")
    start = time.monotonic()
    assert reference.ReferenceLosses(str(ended)).loss(2) is None
    gone = tmp_path / "gone"  # killed at its timeout: no exit line, and no process with its pid
    Path(f"{gone}.rank0.pid999999999.jsonl").write_text(
        _line("start", pid=999999999, ppid=1) + _line("backward", n=1, loss=1.0), encoding="utf-8")
    assert reference.ReferenceLosses(str(gone)).loss(2) is None
    assert reference.ReferenceLosses("").loss(1) is None  # no original given
    assert time.monotonic() - start < 5


def test_the_original_process_is_read_not_a_subprocess_it_started(tmp_path: Path) -> None:
    prefix = tmp_path / "record"
    Path(f"{prefix}.rank0.pid100.jsonl").write_text(_line("start", pid=100, ppid=1) + _line("backward", n=1, loss=2.0)
                                                    + _line("exit"), encoding="utf-8")
    Path(f"{prefix}.rank0.pid200.jsonl").write_text(_line("start", pid=200, ppid=100) + _line("backward", n=1, loss=9.0)
                                                    + _line("exit"), encoding="utf-8")
    assert reference.ReferenceLosses(str(prefix)).loss(1) == 2.0
