"""End to end: every corpus script runs before and after conversion, and behaves the same.

For each ``corpus/<name>/`` (found by glob, the folder name is the test id):

- on one process, the original and the converted script (the tool's output, default target) print the same
  compared lines (``compare`` in ``run.toml``): same seed, same losses;
- the ``--target accelerate`` conversion prints the same lines under Hugging Face Accelerate (skipped when
  ``accelerate`` is not installed);
- the converted script runs on 2 CPU processes (ranks with torch.distributed.run's environment, Gloo) and finishes;
  rank 0 prints the compared lines (``accelerator.print``), rank 1 prints none, and every number in them is finite;
- a metric case (``metric`` in ``run.toml``) prints the same evaluation before training on 2 processes as the
  original on one: every process starts from the same parameters, so a metric left local (one process's share of
  the evaluation set) shows up as a different number;
- a deadlock-prone case (``deadlock_prone = true``: a collective near a branch) finishes on 2 processes with each
  of 3 seeds (``--seed N`` appended to every run's arguments); a hang is a failure;
- once, one converted script goes through the real launcher, ``accelify launch --cpu -n 2``.

No script runs twice: ``accelify verify`` runs the original and the conversion on one process and the conversion on
two for every corpus case (``tests/verify/test_corpus_verify.py``), to the end of the script, and these tests read
what those runs printed (``tests/verification_pool.py``). What verify does not run is run here, through the same
pool: the ``--target accelerate`` variant, every run of a case with several runs (they continue in one folder), and
the cases the tool leaves unchanged, the seeded runs of the deadlock-prone cases. Runs fork from servers that
imported torch already (2-process runs as two forked ranks; ``accelify launch`` is the one run through torchrun).
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from corpus_cases import CASE_DIRS, CORPUS, IDS, Case
from verification_pool import VerificationPool

from accelify.verify import RunSummary, ScriptFiles, convert_files
from accelify.verify.runner import RunSpec

pytestmark = pytest.mark.multiprocess  # every test here runs scripts

HAS_ACCELERATE = importlib.util.find_spec("accelerate") is not None
RANK_PREFIX = re.compile(r"^\[default(\d+)\]:(.*)$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\bnan\b|\binf\b)", re.IGNORECASE)
RUN_TIMEOUT = 180.0  # a whole launch; a script's own work takes well under a second
HANG_TIMEOUT = 120.0  # a seeded 2-process run of a deadlock-prone case still running after this hangs
SEEDS = (1, 2, 3)
METRIC_IDS = [d.name for d in CASE_DIRS if Case.load(d).metric is not None]
DEADLOCK_IDS = [d.name for d in CASE_DIRS if Case.load(d).deadlock_prone]
ONE_PROCESS_TIMEOUT = 120.0
LAUNCHED_CASE = "mnist_style"  # the case that also goes through `accelify launch`
ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]  # this interpreter's, not PATH's
WARNING = re.compile(r"\b\w*Warning\b|^W\d{4} ")  # Python warnings, and torch's glog-style "W1123 ..." lines
Key = tuple[str, str, int, "int | None"]  # (case, variant, number of processes, --seed or None)
VERIFY_RUNS = {("original", 1): "original", ("accelify", 1): "converted", ("accelify", 2): "distributed"}


@dataclass(frozen=True)
class Output:
    """What each process of a script printed over all its runs (stopping at the first failing run)."""

    returncodes: tuple[int, ...]
    stdout: tuple[str, ...]  # one per rank
    stderr: tuple[str, ...]
    seconds: float
    timed_out: bool = False

    @classmethod
    def from_run(cls, run: RunSummary) -> "Output":
        """What a verify run printed (killed at its timeout: exit code -9)."""
        code = -9 if run.exit_code is None else run.exit_code
        return cls(tuple(code for _ in run.stdout), run.stdout, run.stderr, run.seconds, run.exit_code is None)

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.returncodes)

    def explain(self, label: str) -> str:
        ending = f"hung: killed after {self.seconds:.0f} s" if self.timed_out else f"exited {list(self.returncodes)}"
        parts = [f"{label} {ending}"]
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


class Corpus:
    """The selected cases, their conversions, and every run of them: verify's runs where it made them (see the
    module docstring), the others queued on the session's pool when first needed."""

    def __init__(self, pool: VerificationPool, wanted: list[Key], workdir: Path) -> None:
        names = {key[0] for key in wanted}
        self.pool = pool
        self.cases = {d.name: Case.load(d) for d in CASE_DIRS if d.name in names}
        self.wanted = [
            (name, variant, nproc, seed)
            for name, variant, nproc, seed in wanted
            if (variant != "accelerate" or HAS_ACCELERATE) and (nproc == 1 or self.cases[name].distributed)
        ]
        self.workdir = workdir
        self._futures: dict[Key, Future[Output]] = {}
        self._conversions: dict[tuple[str, str], ScriptFiles] = {}
        self._started = False

    def from_verify(self, name: str, variant: str, nproc: int, seed: int | None) -> bool:
        """Whether verify made this run: a converted case with one run, the original or the default target."""
        case = self.cases[name]
        return case.distributed and len(case.runs) == 1 and seed is None and (variant, nproc) in VERIFY_RUNS

    def convert(self, name: str, variant: str) -> ScriptFiles:
        """The case's files (``variant="original"``) or the tool's conversion of them for target ``variant``."""
        files = self.cases[name].files()
        if variant == "original":
            return files
        if (name, variant) not in self._conversions:  # once per case and target: every run of it writes the same files
            converted, result = convert_files(files, target=variant)
            assert result.error is None, f"converting corpus/{name}/input.py failed: {result.error}"
            self._conversions[(name, variant)] = converted
        return self._conversions[(name, variant)]

    def _job(self, name: str, variant: str, nproc: int, seed: int | None) -> Output:
        label = f"{name}-{variant}-{nproc}p" + ("" if seed is None else f"-seed{seed}")
        folder = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.workdir))
        script = self.convert(name, variant).write(folder)
        runs = self.cases[name].runs
        if seed is not None:
            runs = tuple((*args, "--seed", str(seed)) for args in runs)
        if nproc == 2:
            return self._two_ranks(label, script, runs, RUN_TIMEOUT if seed is None else HANG_TIMEOUT)
        start = time.perf_counter()
        out, err, code = "", "", 0
        with self.pool.launcher.borrow() as server:
            for index, args in enumerate(runs):
                stdout, stderr = folder / f".run{index}.out", folder / f".run{index}.err"
                reply = server.run(target=str(script), args=args, cwd=folder, env=child_env(), stdout=stdout,
                                   stderr=stderr, timeout=ONE_PROCESS_TIMEOUT)
                code = -9 if reply["timed_out"] else reply["returncode"]
                out += stdout.read_text(encoding="utf-8", errors="replace")
                err += stderr.read_text(encoding="utf-8", errors="replace")
                if code != 0:
                    break
        return Output((code,), (out,), (err,), time.perf_counter() - start)

    def _two_ranks(self, label: str, script: Path, runs: tuple[tuple[str, ...], ...], timeout: float) -> Output:
        """``script`` on 2 Gloo ranks, once per entry of ``runs``, in its folder (stopping at the first failure)."""
        start = time.perf_counter()
        outs, errs, code, hung = ["", ""], ["", ""], 0, False
        for index, args in enumerate(runs):
            logs = Path(tempfile.mkdtemp(prefix=f"{label}-logs{index}-", dir=self.workdir))
            outcome = self.pool.launcher.run(RunSpec(label=label, folder=script.parent, target=script.name, logs=logs,
                                                     args=args, processes=2, timeout=timeout))
            for rank in range(2):
                outs[rank] += outcome.stdout[rank] if rank < len(outcome.stdout) else ""
                errs[rank] += outcome.stderr[rank] if rank < len(outcome.stderr) else ""
            hung = outcome.timed_out
            code = -9 if outcome.exit_code is None else outcome.exit_code
            if code != 0:
                break
        return Output((code, code), tuple(outs), tuple(errs), time.perf_counter() - start, hung)

    def _start(self) -> None:
        for name, variant, _, _ in self.wanted:  # convert here (before any job reads the conversions from other
            # threads), so a conversion error fails the test that needs it
            self.convert(name, variant)
        for key in sorted(self.wanted, key=lambda key: key[2]):  # one-process runs first: they are the cheap ones
            if not self.from_verify(*key):
                self._futures[key] = self.pool.submit("e2e/" + "/".join(map(str, key)), lambda k=key: self._job(*k))
        self._started = True

    def output(self, name: str, variant: str, nproc: int = 1, seed: int | None = None) -> Output:
        if not self._started:
            self._start()
        if self.from_verify(name, variant, nproc, seed):
            run = self.pool.corpus(name).run(VERIFY_RUNS[(variant, nproc)])
            assert run is not None, f"accelify verify of corpus/{name} made no {variant} run on {nproc} process(es)"
            return Output.from_run(run)
        return self._futures[(name, variant, nproc, seed)].result()


# Which runs each test needs: (variant, number of processes); a test's ``seed`` parameter is appended as --seed N.
NEEDS = {
    "test_converted_prints_the_same_on_one_process": [("original", 1), ("accelify", 1)],
    "test_accelerate_target_prints_the_same_under_hf_accelerate": [("original", 1), ("accelerate", 1)],
    "test_converted_runs_on_two_processes": [("accelify", 2)],
    "test_metric_before_training_is_the_whole_evaluation": [("original", 1), ("accelify", 2)],
    "test_deadlock_prone_case_finishes_with_each_seed": [("accelify", 2)],
}


@pytest.fixture(scope="module")
def corpus(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, verification_pool: VerificationPool
) -> Iterator[Corpus]:
    wanted: dict[Key, None] = {}  # the runs the selected tests need, in test order
    for item in request.session.items:
        if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params:
            params = item.callspec.params
            for variant, nproc in NEEDS.get(item.originalname, []):
                wanted[(params["name"], variant, nproc, params.get("seed"))] = None
    yield Corpus(verification_pool, list(wanted), tmp_path_factory.mktemp("corpus-runs"))


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
    assert not noise, "the 2-process run printed warnings a user cannot act on:\n" + "\n".join(noise)


@pytest.mark.parametrize("name", METRIC_IDS)
def test_metric_before_training_is_the_whole_evaluation(corpus: Corpus, name: str) -> None:
    case = corpus.cases[name]
    original = corpus.output(name, "original")
    assert original.ok, original.explain(f"corpus/{name}/input.py")
    expected = case.metrics(original.stdout[0])
    assert expected, f"corpus/{name}/input.py printed no line matching metric {case.metric.pattern!r}"
    assert all(case.compare.search(line) for line in expected), "metric lines must also match `compare`"
    out = corpus.output(name, "accelify", nproc=2)
    assert out.ok, out.explain(f"converted corpus/{name} on 2 processes")
    assert case.metrics(out.stdout[0]) == expected, (
        f"the evaluation before training differs on 2 processes (one process's share of the data?):\n"
        f"original, 1 process: {expected}\nconverted, 2 processes: {case.metrics(out.stdout[0])}"
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", DEADLOCK_IDS)
def test_deadlock_prone_case_finishes_with_each_seed(corpus: Corpus, name: str, seed: int) -> None:
    out = corpus.output(name, "accelify", nproc=2, seed=seed)
    assert out.ok, out.explain(f"converted corpus/{name} on 2 processes with --seed {seed}")


def test_accelify_launch_runs_a_converted_script(tmp_path: Path) -> None:
    """The real launcher path, once: convert, then ``accelify launch --cpu -n 2``; rank 0 prints, once."""
    case = Case.load(CORPUS / LAUNCHED_CASE)
    converted, _ = convert_files(case.files())
    script = converted.write(tmp_path)
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
