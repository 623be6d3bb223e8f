"""Two "machines" on loopback, one process each, with static and c10d rendezvous."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "multinode_checks.py"
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.multiprocess
@pytest.mark.parametrize("rdzv", ["static", "c10d"])
def test_two_machines_on_loopback(rdzv: str, clean_env) -> None:
    port = free_port()
    procs = [
        subprocess.Popen(
            [*ACCELIFY, "launch", "--cpu", "--num_machines", "2", "--machine_rank", str(i), "-n", "2",
             "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), "--rdzv_backend", rdzv,
             str(WORKER), f"machine{i}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(None))
        for i in (0, 1)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=120))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for i, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"machine {i}:\n{out}\n{err}"
        assert "MULTINODE-OK" in out
        assert f"1 process x 2 machines (machine {i}, 2 in total), cpu (gloo)" in err
    assert sorted(line.split()[3] for out, _ in outputs for line in out.splitlines()
                  if line.startswith("MULTINODE-OK")) == ["0", "1"]
