"""End to end: every corpus script runs before and after conversion, and behaves the same.

For each ``corpus/<name>/`` (found by glob, the folder name is the test id):

- on one process, the original and the converted script (the tool's output, default target) print the same
  compared lines (``compare`` in ``run.toml``): same seed, same losses;
- the ``--target accelerate`` conversion prints the same lines under Hugging Face Accelerate (skipped when
  ``accelerate`` is not installed);
- the converted script runs on 2 CPU processes (``torch.distributed.run --standalone``, Gloo) and finishes; rank 0
  prints the compared lines (``accelerator.print``), rank 1 prints none, and every number in them is finite;
- once, one converted script goes through the real launcher, ``accelify launch --cpu -n 2``.

Cost: a corpus script's own work is a few hundredths of a second, but ``python script.py`` spends about 2 s of CPU
importing torch first. The one-process runs are fresh processes forked from a server that has imported torch already
(``zygote.py`` next to this file: same argv, cwd, environment, output and exit code as ``python script.py``). All
runs of the selected cases start together, two at a time (CI has two cores), the first time a result is needed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import Queue
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"
ZYGOTE = Path(__file__).resolve().with_name("zygote.py")
CASE_DIRS = sorted(p.parent for p in CORPUS.glob("*/input.py"))
IDS = [d.name for d in CASE_DIRS]

HAS_ACCELERATE = importlib.util.find_spec("accelerate") is not None
RANK_PREFIX = re.compile(r"^\[default(\d+)\]:(.*)$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\bnan\b|\binf\b)", re.IGNORECASE)
RUN_TIMEOUT = 180.0  # a whole launch; a script's own work takes well under a second
ONE_PROCESS_TIMEOUT = 120.0
WORKERS = 2
LAUNCHED_CASE = "mnist_style"  # the case that also goes through `accelify launch`
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]  # this interpreter's, not PATH's
WARNING = re.compile(r"\b\w*Warning\b|^W\d{4} ")  # Python warnings, and torch's glog-style "W1123 ..." lines


@dataclass(frozen=True)
class Case:
    """One corpus folder and its ``run.toml``."""

    name: str
    directory: Path
    runs: tuple[tuple[str, ...], ...]
    compare: re.Pattern[str]
    distributed: bool

    @classmethod
    def load(cls, directory: Path) -> "Case":
        cfg = tomllib.loads((directory / "run.toml").read_text(encoding="utf-8"))
        runs = cfg["runs"] if "runs" in cfg else [cfg.get("args", [])]
        return cls(
            name=directory.name,
            directory=directory,
            runs=tuple(tuple(run) for run in runs),
            compare=re.compile(cfg["compare"]),
            distributed=bool(cfg.get("distributed", True)),
        )

    def source(self) -> str:
        return (self.directory / "input.py").read_text(encoding="utf-8")

    def compared(self, stdout: str) -> list[str]:
        return [line for line in stdout.splitlines() if self.compare.search(line)]


@dataclass(frozen=True)
class Output:
    """What each process of a script printed over all its runs (stopping at the first failing run)."""

    returncodes: tuple[int, ...]
    stdout: tuple[str, ...]  # one per rank
    stderr: tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.returncodes)

    def explain(self, label: str) -> str:
        parts = [f"{label} exited {list(self.returncodes)}"]
        for rank, (out, err) in enumerate(zip(self.stdout, self.stderr)):
            parts.append(f"--- rank {rank} stdout ---\n{out[-3000:]}\n--- rank {rank} stderr ---\n{err[-3000:]}")
        return "\n".join(parts)


def child_env(**extra: str) -> dict[str, str]:
    """A script's environment: nothing inherited from a launcher, accelify or accelerate; CPU only; one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_", "TORCHELASTIC_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    env.update(extra)
    return env


class Zygote:
    """One fork server (``zygote.py``): runs one-process jobs, one at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
        )
        ready = self.proc.stdout.readline()  # type: ignore[union-attr]
        if "ready" not in ready:
            raise RuntimeError(f"the e2e fork server did not start (exit {self.proc.poll()}): {ready!r}")

    def run(self, script: Path, runs: tuple[tuple[str, ...], ...]) -> Output:
        """Run ``script`` once per entry of ``runs``, in order, in the script's folder."""
        start = time.perf_counter()
        out, err, code = "", "", 0
        for index, args in enumerate(runs):
            job = {
                "script": str(script), "args": list(args), "cwd": str(script.parent), "env": child_env(),
                "stdout": str(script.with_name(f".run{index}.out")),
                "stderr": str(script.with_name(f".run{index}.err")),
                "timeout": ONE_PROCESS_TIMEOUT,
            }
            self.proc.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            reply = self.proc.stdout.readline()  # type: ignore[union-attr]
            if not reply:
                raise RuntimeError(f"the e2e fork server died (exit {self.proc.poll()})")
            code = json.loads(reply)["returncode"]
            out += Path(job["stdout"]).read_text(encoding="utf-8", errors="replace")
            err += Path(job["stderr"]).read_text(encoding="utf-8", errors="replace")
            if code != 0:
                break
        return Output((code,), (out,), (err,), time.perf_counter() - start)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def launch_two_processes(script: Path, runs: tuple[tuple[str, ...], ...]) -> Output:
    """Run ``script`` on 2 Gloo processes with torch.distributed.run (as tests/conftest.py's ``run_distributed``),
    once per entry of ``runs``, in the script's folder; each rank's lines are told apart by torchrun's ``--tee`` prefix.
    """
    start = time.perf_counter()
    outs: list[list[str]] = [[], []]
    errs: list[list[str]] = [[], []]
    code = 0
    for args in runs:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--tee", "3",
            str(script), *args,
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=script.parent, env=child_env(), timeout=RUN_TIMEOUT
        )
        for text, sink in ((proc.stdout, outs), (proc.stderr, errs)):
            for line in text.splitlines():
                match = RANK_PREFIX.match(line)
                if match and int(match.group(1)) < 2:
                    sink[int(match.group(1))].append(match.group(2))
                else:
                    sink[0].append(line)
        code = proc.returncode
        if code != 0:
            break
    return Output(
        (code, code), tuple("\n".join(o) for o in outs), tuple("\n".join(e) for e in errs), time.perf_counter() - start
    )


def _pipeline():
    if importlib.util.find_spec("accelify.pipeline") is None:
        pytest.skip("accelify.pipeline does not exist yet: nothing to convert the corpus with")
    return importlib.import_module("accelify.pipeline")


class Corpus:
    """The selected cases, their conversions, and every run of them (started together on first use)."""

    def __init__(self, wanted: list[tuple[str, str, int]], workdir: Path) -> None:
        names = {name for name, _, _ in wanted}
        self.cases = {d.name: Case.load(d) for d in CASE_DIRS if d.name in names}
        self.wanted = [
            (name, variant, nproc)
            for name, variant, nproc in wanted
            if (variant != "accelerate" or HAS_ACCELERATE) and (nproc == 1 or self.cases[name].distributed)
        ]
        self.workdir = workdir
        self._sources: dict[tuple[str, str], str] = {}
        self._futures: dict[tuple[str, str, int], Future[Output]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._zygotes: Queue[Zygote] = Queue()
        self._all: list[Zygote] = []
        self._lock = threading.Lock()

    def convert(self, name: str, variant: str) -> str:
        """The original source (``variant="original"``) or the tool's output for target ``variant``."""
        key = (name, variant)
        if key not in self._sources:
            source = self.cases[name].source()
            if variant != "original":
                result = _pipeline().convert_source(source, path=f"corpus/{name}/input.py", target=variant)
                assert result.error is None, f"converting corpus/{name}/input.py failed: {result.error}"
                source = result.new
            self._sources[key] = source
        return self._sources[key]

    def _zygote(self) -> Zygote:
        with self._lock:
            if self._zygotes.empty() and len(self._all) < WORKERS:
                zygote = Zygote()
                self._all.append(zygote)
                return zygote
        return self._zygotes.get()

    def _job(self, name: str, variant: str, nproc: int) -> Output:
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-{variant}-{nproc}p-", dir=self.workdir))
        script = folder / "train.py"
        script.write_text(self.convert(name, variant), encoding="utf-8")
        if nproc == 2:
            return launch_two_processes(script, self.cases[name].runs)
        zygote = self._zygote()
        try:
            return zygote.run(script, self.cases[name].runs)
        finally:
            self._zygotes.put(zygote)

    def _start(self) -> None:
        _pipeline()
        for name, variant, _ in self.wanted:  # convert here, so a conversion error fails the test that needs it
            self.convert(name, variant)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="corpus-run")
        for key in sorted(self.wanted, key=lambda key: key[2]):  # one-process runs first: they are the cheap ones
            self._futures[key] = self._pool.submit(self._job, *key)

    def output(self, name: str, variant: str, nproc: int = 1) -> Output:
        if self._pool is None:
            self._start()
        return self._futures[(name, variant, nproc)].result()

    def close(self) -> None:
        if self._pool is not None:
            for future in self._futures.values():
                future.cancel()
            self._pool.shutdown(wait=True)
        for zygote in self._all:
            zygote.close()


# Which runs each test needs: (variant, number of processes).
NEEDS = {
    "test_converted_prints_the_same_on_one_process": [("original", 1), ("accelify", 1)],
    "test_accelerate_target_prints_the_same_under_hf_accelerate": [("original", 1), ("accelerate", 1)],
    "test_converted_runs_on_two_processes": [("accelify", 2)],
}


@pytest.fixture(scope="module")
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    wanted: dict[tuple[str, str, int], None] = {}  # the runs the selected tests need, in test order
    for item in request.session.items:
        if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params:
            for variant, nproc in NEEDS.get(item.originalname, []):
                wanted[(item.callspec.params["name"], variant, nproc)] = None
    corpus = Corpus(list(wanted), tmp_path_factory.mktemp("corpus-runs"))
    yield corpus
    corpus.close()


def _original_lines(corpus: Corpus, name: str) -> list[str]:
    out = corpus.output(name, "original")
    assert out.ok, out.explain(f"corpus/{name}/input.py")
    lines = corpus.cases[name].compared(out.stdout[0])
    assert lines, f"corpus/{name}/input.py printed no line matching {corpus.cases[name].compare.pattern!r}"
    return lines


def _check_finite(lines: list[str], label: str) -> None:
    for line in lines:
        for token in NUMBER.findall(line):
            assert math.isfinite(float(token)), f"{label}: non-finite number in {line!r}"


@pytest.mark.parametrize("name", IDS)
def test_converted_prints_the_same_on_one_process(corpus: Corpus, name: str) -> None:
    expected = _original_lines(corpus, name)
    out = corpus.output(name, "accelify")
    assert out.ok, out.explain(f"converted corpus/{name} (accelify.runtime)")
    assert corpus.cases[name].compared(out.stdout[0]) == expected


@pytest.mark.skipif(not HAS_ACCELERATE, reason="Hugging Face accelerate is not installed (optional test dependency)")
@pytest.mark.parametrize("name", IDS)
def test_accelerate_target_prints_the_same_under_hf_accelerate(corpus: Corpus, name: str) -> None:
    expected = _original_lines(corpus, name)
    out = corpus.output(name, "accelerate")
    assert out.ok, out.explain(f"converted corpus/{name} (--target accelerate, under HF Accelerate)")
    assert corpus.cases[name].compared(out.stdout[0]) == expected


@pytest.mark.multiprocess
@pytest.mark.parametrize("name", IDS)
def test_converted_runs_on_two_processes(corpus: Corpus, name: str) -> None:
    case = corpus.cases[name]
    if not case.distributed:
        pytest.skip(f"corpus/{name} is not converted (run.toml: distributed = false)")
    out = corpus.output(name, "accelify", nproc=2)
    assert out.ok, out.explain(f"converted corpus/{name} on 2 processes")
    rank0 = case.compared(out.stdout[0])
    assert rank0, f"rank 0 printed no line matching {case.compare.pattern!r}:\n{out.stdout[0]}"
    assert not case.compared(out.stdout[1]), f"rank 1 printed compared lines (print once per machine):\n{out.stdout[1]}"
    _check_finite(rank0, f"corpus/{name} on 2 processes")
    noise = [line for err in out.stderr for line in err.splitlines() if WARNING.search(line)]
    assert not noise, f"the 2-process run printed warnings a user cannot act on:\n" + "\n".join(noise)


@pytest.mark.multiprocess
def test_accelify_launch_runs_a_converted_script(tmp_path: Path) -> None:
    """The real launcher path, once: convert, then ``accelify launch --cpu -n 2``; rank 0 prints, once."""
    case = Case.load(CORPUS / LAUNCHED_CASE)
    script = tmp_path / "train.py"
    script.write_text(_pipeline().convert_source(case.source()).new, encoding="utf-8")
    proc = subprocess.run(
        [*ACCELIFY, "launch", "--cpu", "-n", "2", "--quiet", str(script), *case.runs[0]],
        capture_output=True, text=True, cwd=tmp_path, env=child_env(), timeout=RUN_TIMEOUT,
    )
    assert proc.returncode == 0, f"accelify launch exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = case.compared(proc.stdout)
    epochs = int(case.runs[0][case.runs[0].index("--epochs") + 1])
    assert len(lines) == 2 * epochs, f"expected one loss and one accuracy line per epoch, printed once:\n{proc.stdout}"
    _check_finite(lines, "accelify launch")
    noise = [line for line in proc.stderr.splitlines() if WARNING.search(line)]
    assert not noise, "accelify launch printed warnings a user cannot act on:\n" + "\n".join(noise)
    assert (tmp_path / "net.pt").is_file(), "the converted script's final save did not happen"
