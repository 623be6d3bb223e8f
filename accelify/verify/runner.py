"""Running a script under the verify recorder: on one process, or on N CPU processes through torch.distributed.run.

A run never edits the script: the recorder comes in through ``PYTHONPATH`` (the startup-hook folder first) and the
``ACCELIFY_VERIFY_*`` variables. Every run gets a clean environment: no ``ACCELIFY_*``/``ACCELERATE_*``/torchrun
variables inherited, no GPU (``CUDA_VISIBLE_DEVICES=""``, so N processes means N Gloo processes), one thread per
process and a fixed ``PYTHONHASHSEED``, so that two runs of the same script compute the same numbers. The runtime's
sentinels are off (``ACCELIFY_SENTINELS=0``): verify makes the same checks itself, exactly, from what the recorder
saw, and a sentinel's error would end the run before verify could name the check that fails.

A run that outlives its timeout is a hang: every recorded process is asked for its Python stacks (SIGUSR1, which
the recorder hands to faulthandler), then every process of the run is killed (each worker's session, then the
launcher's), so nothing is left behind.

:class:`Launcher` starts each run as a user would (``python script.py``; ``python -m torch.distributed.run``).
:class:`ForkServerLauncher` forks one-process runs from fork servers that imported torch once (test suites).
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from accelify.verify.forkserver import ForkServer
from accelify.verify.hook import HOOK_DIR
from accelify.verify.hook import accelify_verify_recorder as recorder
from accelify.verify.records import ProcessRecord, read_records

STACK_WAIT = 1.0  # seconds hung processes get to write their stacks
PORT_TRIES = 3  # an N-process run whose store found its port taken (another run's) is started again, this often
_PORT_TAKEN = ("eaddrinuse", "address already in use")
AGENT_GRACE = 10.0  # seconds torchrun's agent gets to stop after its workers were killed
_INHERITED_PREFIXES = ("ACCELIFY_", "ACCELERATE_", "TORCHELASTIC_")
_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                       "MASTER_ADDR", "MASTER_PORT", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


@dataclass(frozen=True)
class RunSpec:
    """One run: ``target`` (a file in ``folder``, or a module name with ``module``) with ``args``, in ``folder``.

    ``steps`` ends every process after that many optimizer steps (0: no limit); ``batches`` ends every DataLoader
    epoch after that many batches and ``epochs`` the run after that many training epochs (0: no limit; see
    ``hook/accelify_verify_loaders.py``); ``logs`` receives the records and
    the processes' output (it must not be ``folder``, which the script sees as its working directory).
    """

    label: str
    folder: Path
    target: str
    logs: Path
    args: tuple[str, ...] = ()
    processes: int = 1
    steps: int = 0
    batches: int = 0
    epochs: int = 0
    seed: int = 0
    timeout: float = 300.0
    module: bool = False
    exact: bool = False  # exact mode (hook/accelify_verify_exact.py): split batches, per-process seeds
    reference: Path | None = None  # exact mode: the original's record prefix (its losses tell a sum from a mean)

    @property
    def record_prefix(self) -> Path:
        return self.logs / "record"

    @property
    def program(self) -> str:
        """What python runs: the script's absolute path (so stacks and loop sites name its file), or the module."""
        return self.target if self.module else str(self.folder.resolve() / self.target)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended, what each process printed (by rank) and what it recorded."""

    spec: RunSpec
    exit_code: int | None  # python's, or torchrun's for N processes; None when the run was killed at the timeout
    timed_out: bool
    seconds: float
    stdout: tuple[str, ...]
    stderr: tuple[str, ...]
    records: tuple[ProcessRecord, ...]
    launcher_output: str = ""  # torchrun's own messages

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def run_environment(spec: RunSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of ``spec``'s processes: ``base`` (default ``os.environ``) cleaned, plus the recorder's."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(_INHERITED_PREFIXES) and k not in _LAUNCHER_VARIABLES}
    path = env.get("PYTHONPATH")
    env.update(
        PYTHONPATH=str(HOOK_DIR) + (os.pathsep + path if path else ""),
        PYTHONHASHSEED=str(spec.seed),
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        ACCELIFY_SENTINELS="0",  # verify checks the same things itself (see the module docstring)
    )
    env[recorder.ENV_RECORD] = str(spec.record_prefix)
    env[recorder.ENV_STEPS] = str(spec.steps)
    env[recorder.ENV_BATCHES] = str(spec.batches)
    env[recorder.ENV_EPOCHS] = str(spec.epochs)
    env[recorder.ENV_SEED] = str(spec.seed)
    env[recorder.ENV_PROCESSES] = str(spec.processes)
    env[recorder.ENV_ROOT] = str(spec.folder)
    if spec.exact:
        env[recorder.ENV_EXACT] = "1"
        if spec.reference is not None:
            env["ACCELIFY_VERIFY_REFERENCE"] = str(spec.reference)
    return env


class Launcher:
    """Starts runs as a user would: ``python target args`` for one process, torch.distributed.run for N."""

    queues = False  # every run starts at once (a launcher with a few fork servers queues runs behind busy ones)

    def __init__(self) -> None:
        self._live: set[subprocess.Popen[bytes]] = set()
        self._live_lock = threading.Lock()

    def run(self, spec: RunSpec) -> RunOutcome:
        """Run ``spec`` to its end, its step limit or its timeout; never raises for the script's own failure."""
        spec.logs.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        if spec.processes == 1:
            code, timed_out = self._one(spec)
            outputs = ((spec.logs / "stdout.txt",), (spec.logs / "stderr.txt",))
            launcher = ""
        else:
            for attempt in range(PORT_TRIES):
                if attempt:
                    _clear(spec.logs)  # the failed attempt's records and outputs
                code, timed_out = self._many(spec)
                outputs = _worker_logs(spec)
                launcher = _read(spec.logs / "launcher.txt")
                if code == 0 or timed_out or not _port_taken(launcher, *map(_read, outputs[1])):
                    break
        seconds = time.monotonic() - start
        return RunOutcome(spec, code, timed_out, seconds, tuple(_read(p) for p in outputs[0]),
                          tuple(_read(p) for p in outputs[1]), read_records(spec.record_prefix), launcher)

    def close(self) -> None:
        """Release what the launcher holds (nothing here)."""

    def stop_all(self) -> None:
        """End every run still going, its workers with it (the user interrupted verify, or it was terminated): the
        runs start in sessions of their own, so an interrupt of verify alone would leave them running."""
        with self._live_lock:
            live = list(self._live)
        for proc in live:
            for pid in _children(proc.pid):
                _signal_group(pid, signal.SIGKILL)
            _signal_group(proc.pid, signal.SIGKILL)

    def _one(self, spec: RunSpec) -> tuple[int | None, bool]:
        command = [sys.executable, *(["-m"] if spec.module else []), spec.program, *spec.args]
        return self._popen(spec, command, spec.logs / "stdout.txt", spec.logs / "stderr.txt")

    def _many(self, spec: RunSpec) -> tuple[int | None, bool]:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={spec.processes}",
            "--log-dir", str(spec.logs / "workers"), "--redirects", "3",
            *(["-m"] if spec.module else []), spec.program, *spec.args,
        ]
        return self._popen(spec, command, spec.logs / "launcher.txt", None)

    def _popen(self, spec: RunSpec, command: list[str], out: Path, err: Path | None) -> tuple[int | None, bool]:
        """Run ``command``; its stdout to ``out``, its stderr to ``err`` (None: into ``out`` too)."""
        with ExitStack() as files:
            stdout = files.enter_context(open(out, "wb"))
            stderr = files.enter_context(open(err, "wb")) if err is not None else subprocess.STDOUT
            proc = subprocess.Popen(command, cwd=spec.folder, env=run_environment(spec), stdin=subprocess.DEVNULL,
                                    stdout=stdout, stderr=stderr, start_new_session=True)
            with self._live_lock:
                self._live.add(proc)
            try:
                return proc.wait(timeout=spec.timeout), False
            except subprocess.TimeoutExpired:
                end_hung_run(proc, spec.record_prefix)
                return None, True
            except BaseException:  # interrupted while this thread waited: the run must not outlive verify
                self.stop_all()
                raise
            finally:
                with self._live_lock:
                    self._live.discard(proc)


class ForkServerLauncher(Launcher):
    """Runs forked from up to ``servers`` fork servers (torch imported once each): one-process runs, and N-process
    runs as N forked ranks with torch.distributed.run's environment (no agent: test suites save its import and the
    workers'). Thread-safe: a run waits for a free server. Call :meth:`close` at the end."""

    queues = True

    def __init__(self, servers: int = 2) -> None:
        super().__init__()
        self.size = servers
        self._free: queue.Queue[ForkServer] = queue.Queue()
        self._all: list[ForkServer] = []
        self._lock = threading.Lock()

    def _server(self) -> ForkServer:
        with self._lock:
            if self._free.empty() and len(self._all) < self.size:
                base = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
                base.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
                server = ForkServer(base)
                self._all.append(server)
                return server
        return self._free.get()

    @contextmanager
    def borrow(self) -> Iterator[ForkServer]:
        """A fork server for this thread's use (also for runs without the recorder: pass no ``hook_dir``)."""
        server = self._server()
        try:
            yield server
        finally:
            self._free.put(server)

    def _one(self, spec: RunSpec) -> tuple[int | None, bool]:
        with self.borrow() as server:
            reply = server.run(target=spec.program, args=spec.args, cwd=spec.folder, env=run_environment(spec),
                               stdout=spec.logs / "stdout.txt", stderr=spec.logs / "stderr.txt",
                               timeout=spec.timeout, module=spec.module, hook_dir=HOOK_DIR)
        return reply["returncode"], bool(reply["timed_out"])

    def _many(self, spec: RunSpec) -> tuple[int | None, bool]:
        """N ranks forked from one fork server with torchrun's environment (rank 0 hosts the store)."""
        folder = spec.logs / "workers" / "fork" / "attempt_0"
        port = _free_port()
        ranks = []
        for rank in range(spec.processes):
            (folder / str(rank)).mkdir(parents=True, exist_ok=True)
            env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(spec.processes),
                   "LOCAL_WORLD_SIZE": str(spec.processes), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            ranks.append({"env": env, "stdout": folder / str(rank) / "stdout.log", "stderr": folder / str(rank) / "stderr.log"})
        (spec.logs / "launcher.txt").write_text("")
        with self.borrow() as server:
            reply = server.run(target=spec.program, args=spec.args, cwd=spec.folder, env=run_environment(spec),
                               stdout=spec.logs / "stdout.txt", stderr=spec.logs / "stderr.txt",
                               timeout=spec.timeout, module=spec.module, hook_dir=HOOK_DIR, ranks=ranks)
        return reply["returncode"], bool(reply["timed_out"])

    def close(self) -> None:
        with self._lock:
            for server in self._all:
                server.close()
            self._all.clear()


def end_hung_run(proc: subprocess.Popen[bytes], record_prefix: Path) -> None:
    """Ask every recorded process of a hung run for its stacks, then kill them all and the launcher.

    A recorded process that has ended since may have left its pid to another process (another verification's
    worker, on a busy machine): only a pid that is still the recorded process is signalled (:func:`still_running`),
    or SIGUSR1 and SIGKILL would end an unrelated process without a message."""
    recorded = [r.pid for r in read_records(record_prefix) if still_running(r)]
    workers = set(recorded) | _children(proc.pid)
    for pid in recorded:
        _signal(pid, recorder.STACK_SIGNAL)
    if recorded:
        time.sleep(STACK_WAIT)
    for pid in workers:
        _signal_group(pid, signal.SIGKILL)
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=AGENT_GRACE)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


START_SLACK = 1.0  # seconds: /proc's boot time is whole seconds


def still_running(record: ProcessRecord) -> bool:
    """Whether ``record``'s pid is still the process that wrote it: same parent, started no later than its first
    event (Linux ``/proc``; where there is none, every recorded pid is taken for its process, as before)."""
    if not os.path.isdir("/proc/self"):
        return True
    try:
        with open(f"/proc/{record.pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
        ppid, ticks = int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return False  # gone
    if ppid != record.ppid:
        return False
    if record.started:
        started = _boot_time() + ticks / os.sysconf("SC_CLK_TCK")
        if started > record.started + START_SLACK:
            return False
    return True


def _boot_time() -> float:
    """Seconds since the epoch at which this machine booted (``btime`` of ``/proc/stat``)."""
    with open("/proc/stat", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def _free_port() -> int:
    """A TCP port free on this machine now (the OS picks it), for rank 0's store."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _port_taken(*outputs: str) -> bool:
    """The run failed because the port its store was to listen on was taken between choosing and binding it (two
    runs at once: the port is free when chosen, then another process binds it first)."""
    return any(marker in text.lower() for text in outputs for marker in _PORT_TAKEN)


def _clear(logs: Path) -> None:
    """Empty a run's log folder for another attempt."""
    import shutil

    for entry in logs.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _children(pid: int) -> set[int]:
    """The child processes of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as fh:
                found.update(int(p) for p in fh.read().split())
        except (OSError, ValueError):
            continue
    return found


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pid: int, number: int) -> None:
    """Signal ``pid``'s process group when it leads one (workers and our runs start new sessions), else ``pid``."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, number)
        else:
            os.kill(pid, number)
    except (ProcessLookupError, PermissionError):
        pass


def _worker_logs(spec: RunSpec) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """torchrun's per-rank output files (``--log-dir``/``--redirects``), by rank, for the first attempt."""
    roots = sorted((spec.logs / "workers").glob("*/attempt_0"))
    root = roots[0] if roots else spec.logs / "workers" / "missing"
    ranks = range(spec.processes)
    return tuple(root / str(r) / "stdout.log" for r in ranks), tuple(root / str(r) / "stderr.log" for r in ranks)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
