"""The converted corpus cases on GPUs: on one GPU they print what the original prints on that GPU; on 2 GPUs they
train through ``accelify launch --multi_gpu -n 2`` (NCCL) and print finite numbers once.

Skipped without CUDA (tests/conftest.py); the 2-GPU runs below 2 GPUs. The cases and their conversion are the
CPU tests' (``tests/corpus_cases.py``, ``accelify.verify.convert_files``). Unlike on the CPU, the numbers are
compared with a tolerance: a converted script runs the same operations, but where the conversion moves a loss out
of autocast (``accelerator.autocast`` hands back fp32 outputs, a hand-written ``torch.autocast`` block computes
the loss in half precision) the last digits may differ. Runs go side by side (several processes per GPU).
"""

from __future__ import annotations

import math
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpus_cases import CASE_DIRS, Case
from gpu_runs import ACCELIFY, GPU_COUNT, gpu_env, run

from accelify.verify import convert_files

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess]

CASES = {d.name: Case.load(d) for d in CASE_DIRS}
CONVERTED = [name for name, case in CASES.items() if case.status is None]  # "attention": refused, not written
DISTRIBUTED = [name for name in CONVERTED if CASES[name].distributed]
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\bnan\b|\binf\b)", re.IGNORECASE)
RTOL, ATOL = 2e-2, 1e-3
SIDE_BY_SIDE = 6  # runs at once: each holds a CUDA context (~0.5 GiB) and little else


@dataclass(frozen=True)
class Output:
    ok: bool
    stdout: str
    explain: str


def _runs(name: str, variant: str, processes: int, workdir: Path) -> Output:
    """Every run of the case (continuing in one folder), the original or the conversion, on 1 or 2 GPUs."""
    case = CASES[name]
    files = case.files()
    if variant == "converted":
        files, result = convert_files(files)
        if result.error is not None:
            return Output(False, "", f"converting corpus/{name} failed: {result.error}")
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-{variant}-{processes}gpu-", dir=workdir))
    script = files.write(folder)
    out = ""
    for args in case.runs:
        if processes == 1:
            argv = [ACCELIFY[0], str(script), *args]
        else:
            argv = [*ACCELIFY, "launch", "--multi_gpu", "-n", str(processes), "--quiet", str(script), *args]
        proc = run(argv, env=gpu_env(), cwd=folder)
        out += proc.stdout
        if proc.returncode != 0:
            return Output(False, out, f"corpus/{name} ({variant}, {processes} GPU(s)) {' '.join(args)} exited "
                                      f"{proc.returncode}\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n"
                                      f"{proc.stderr[-5000:]}")
    return Output(True, out, "")


# Which runs each test needs: (variant, number of GPUs).
NEEDS = {"test_converted_case_prints_what_the_original_prints_on_one_gpu": [("original", 1), ("converted", 1)],
         "test_converted_case_trains_on_two_gpus": [("converted", 2)]}


@pytest.fixture(scope="module")
def outputs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, int], Output]:
    """The runs the selected tests need (``-k mnist_style`` runs one case), all started at once."""
    workdir = tmp_path_factory.mktemp("corpus-gpu")
    jobs: dict[tuple[str, str, int], None] = {}
    for item in request.session.items:
        if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params:
            for variant, gpus in NEEDS.get(item.originalname, []):
                if gpus <= max(GPU_COUNT, 1):
                    jobs[(item.callspec.params["name"], variant, gpus)] = None
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        futures = {job: pool.submit(_runs, *job, workdir) for job in jobs}
        return {job: future.result() for job, future in futures.items()}


def _numbers(line: str) -> list[float]:
    return [float(token) for token in NUMBER.findall(line)]


def _close(expected: list[str], got: list[str]) -> str | None:
    """None when the lines say the same thing with numbers within the tolerance, else the first difference."""
    if len(expected) != len(got):
        return f"{len(got)} compared lines, the original printed {len(expected)}"
    for want, have in zip(expected, got):
        if NUMBER.sub("#", want) != NUMBER.sub("#", have):
            return f"{have!r} != {want!r}"
        for a, b in zip(_numbers(want), _numbers(have)):
            if not math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL):
                return f"{have!r} vs the original's {want!r}: {b} != {a} (rtol {RTOL}, atol {ATOL})"
    return None


@pytest.mark.parametrize("name", CONVERTED)
def test_converted_case_prints_what_the_original_prints_on_one_gpu(outputs, name: str) -> None:
    original, converted = outputs[(name, "original", 1)], outputs[(name, "converted", 1)]
    assert original.ok, original.explain
    assert converted.ok, converted.explain
    expected = CASES[name].compared(original.stdout)
    assert expected, f"corpus/{name} printed no line matching {CASES[name].compare.pattern!r} on the GPU"
    difference = _close(expected, CASES[name].compared(converted.stdout))
    assert difference is None, f"corpus/{name} on one GPU: {difference}"


@pytest.mark.skipif(GPU_COUNT < 2, reason=f"needs 2 GPUs; {GPU_COUNT} visible")
@pytest.mark.parametrize("name", DISTRIBUTED)
def test_converted_case_trains_on_two_gpus(outputs, name: str) -> None:
    out = outputs[(name, "converted", 2)]
    assert out.ok, out.explain
    lines = CASES[name].compared(out.stdout)
    assert lines, f"corpus/{name} on 2 GPUs printed no line matching {CASES[name].compare.pattern!r}:\n{out.stdout}"
    bad = [line for line in lines if not all(math.isfinite(v) for v in _numbers(line))]
    assert not bad, f"corpus/{name} on 2 GPUs printed non-finite numbers: {bad}"
