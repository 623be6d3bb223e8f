"""The checks turn records into verdicts: each failure names the process, the step and what it means (no processes
are started here: the records are built by hand, as the recorder would write them)."""

from __future__ import annotations

import json
from pathlib import Path

from accelify.verify.distributed import distributed_checks
from accelify.verify.equivalence import one_process_checks
from accelify.verify.records import Backward, Group, Loader, Parameter, ProcessRecord, Step, Wrapper
from accelify.verify.report import FAILED, PASSED, SKIPPED, CheckResult, VerifyOptions, VerifyReport
from accelify.verify.runner import RunOutcome, RunSpec

OPTIONS = VerifyOptions(steps=3, processes=2, timeout=30)
SITE = "train.py:12"


def parameter(values: list[float], wrapper: int | str | None = 0) -> Parameter:
    return Parameter((len(values),), len(values), sum(values), tuple(values), False, True, wrapper)


def step(n: int, values: list[float], *, wrapper: int | str | None = 0, rank: int = 0, joined: bool = True,
         loader: Loader | None = None, forward_calls: int = 1) -> Step:
    group = Group(True, 2, rank, "gloo") if joined else Group(False)
    wrappers = (Wrapper(0, forward_calls, "Net"),) if wrapper == 0 else ()
    loaders = {f"{loader.site}#0": loader} if loader is not None else {}
    return Step(n, 0, (parameter(values, wrapper),), group, wrappers, loaders, n)


def loader(length: int | None, batch: int, epoch_draws: tuple[int, ...] = ()) -> Loader:
    return Loader(f"{SITE}#0", SITE, "DataLoaderShard", length, batch, 1, 3, epoch_draws, True)


def record(rank: int, losses: list[float], steps: list[Step], **fields: object) -> ProcessRecord:
    backwards = tuple(Backward(i + 1, loss, (), f"{SITE}#0", i) for i, loss in enumerate(losses))
    return ProcessRecord(rank=rank, pid=100 + rank, ppid=1, backwards=backwards, steps=tuple(steps),
                         stopped=True, **fields)  # type: ignore[arg-type]


def outcome(label: str, records: list[ProcessRecord], *, folder: Path = Path("/nowhere"), code: int | None = 0,
            timed_out: bool = False) -> RunOutcome:
    spec = RunSpec(label, folder, "train.py", folder / "logs", processes=len(records) or 1)
    return RunOutcome(spec, code, timed_out, 1.0, ("",) * max(1, len(records)), ("",) * max(1, len(records)),
                      tuple(records))


def by_name(checks: list[CheckResult]) -> dict[str, CheckResult]:
    return {c.name: c for c in checks}


# -- one process ------------------------------------------------------------------------------------------------------
def test_equal_runs_pass_every_one_process_check() -> None:
    run = outcome("original", [record(0, [1.0, 0.5], [step(1, [0.1, 0.2]), step(2, [0.3, 0.4])])])
    checks = one_process_checks(run, run, OPTIONS)
    assert [c.status for c in checks] == [PASSED] * 4
    assert by_name(checks)["same losses"].detail == "2 losses equal (rtol 1e-05, atol 1e-07)"


def test_a_loss_scaled_by_a_constant_is_named_as_a_scaling() -> None:
    original = outcome("original", [record(0, [2.0, 1.0, 0.8], [step(1, [0.1])])])
    converted = outcome("converted", [record(0, [0.5, 0.25, 0.2], [step(1, [0.1])])])
    losses = by_name(one_process_checks(original, converted, OPTIONS))["same losses"]
    assert losses.status == FAILED
    assert losses.detail.startswith("backward 1: the converted script's loss is 0.5, the original's 2")
    assert "scales the loss handed to backward by 0.25" in losses.meaning


def test_losses_that_differ_otherwise_do_not_claim_a_scaling() -> None:
    original = outcome("original", [record(0, [2.0, 1.0], [step(1, [0.1])])])
    converted = outcome("converted", [record(0, [2.0, 1.5], [step(1, [0.1])])])
    losses = by_name(one_process_checks(original, converted, OPTIONS))["same losses"]
    assert losses.detail.startswith("backward 2:")
    assert "scales" not in losses.meaning and "does not train like the original" in losses.meaning


def test_parameters_that_differ_name_the_step_and_the_parameter() -> None:
    original = outcome("original", [record(0, [1.0], [step(1, [0.1, 0.2]), step(2, [0.3, 0.4])])])
    converted = outcome("converted", [record(0, [1.0], [step(1, [0.1, 0.2]), step(2, [0.3, 0.41])])])
    params = by_name(one_process_checks(original, converted, OPTIONS))["same parameters"]
    assert params.status == FAILED
    assert params.detail.startswith("after step 2 (optimizer 0), parameter 0 (2) differs from the original's by up to")


def test_tolerances_decide_what_counts_as_equal() -> None:
    original = outcome("original", [record(0, [1.0], [step(1, [1.0])])])
    converted = outcome("converted", [record(0, [1.0 + 1e-9], [step(1, [1.0 + 1e-9])])])
    assert all(c.status == PASSED for c in one_process_checks(original, converted, OPTIONS))
    strict = VerifyOptions(steps=3, rtol=0.0, atol=0.0)
    assert by_name(one_process_checks(original, converted, strict))["same losses"].status == FAILED


def test_a_script_that_never_calls_backward_within_the_timeout_is_reported_as_such(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import time\n\ntime.sleep(1000)\n", encoding="utf-8")
    stack = (f'Current thread 0x1 (most recent call first):\n  File "{tmp_path}/train.py", line 3 in <module>\n')
    hung = outcome("original", [ProcessRecord(0, 100, 1, stack=stack)], folder=tmp_path, code=None, timed_out=True)
    fine = outcome("converted", [record(0, [1.0], [step(1, [0.1])])])
    checks = by_name(one_process_checks(hung, fine, OPTIONS))
    runs = checks["original runs"]
    assert runs.status == FAILED
    assert runs.detail == "the original never called backward within 30 s (it was at train.py:3 in <module>: " \
                          "time.sleep(1000))"
    assert runs.stacks == ((0, stack),)
    assert checks["same losses"].status == SKIPPED


def test_a_script_that_finishes_without_backward_has_nothing_to_compare() -> None:
    idle = outcome("original", [ProcessRecord(0, 100, 1, exited=True)])
    runs = by_name(one_process_checks(idle, idle, OPTIONS))["original runs"]
    assert runs.detail == "the original finished without calling backward"


def test_a_crashing_conversion_is_named_with_its_error() -> None:
    good = outcome("original", [record(0, [1.0], [step(1, [0.1])])])
    broken = outcome("converted", [ProcessRecord(0, 100, 1, exited=True, error="NameError: name 'x' is not defined")],
                     code=1)
    runs = by_name(one_process_checks(good, broken, OPTIONS))["converted runs"]
    assert runs.detail == "the converted script failed (exit 1): NameError: name 'x' is not defined"
    assert runs.meaning == "the conversion breaks the script on one process"


# -- N processes ------------------------------------------------------------------------------------------------------
def reference(length: int = 16, batch: int = 32) -> RunOutcome:
    return outcome("converted", [record(0, [1.0], [step(1, [0.1], wrapper=None, joined=False,
                                                        loader=loader(length, batch))])])


def two(steps0: list[Step], steps1: list[Step], losses: tuple[list[float], list[float]] = ([1.0], [1.0]),
        **run: object) -> RunOutcome:
    return outcome("distributed", [record(0, losses[0], steps0), record(1, losses[1], steps1)], **run)  # type: ignore[arg-type]


def test_a_healthy_data_parallel_run_passes_every_check() -> None:
    run = two([step(1, [0.1], loader=loader(8, 32))], [step(1, [0.1], rank=1, loader=loader(8, 32))])
    checks = distributed_checks(run, reference(), OPTIONS)
    assert [c.status for c in checks] == [PASSED] * 6, checks
    assert by_name(checks)["data sharded"].detail == "train.py:12: 256 of 512 samples per epoch (process 0)"


def test_split_batches_count_as_sharded_and_a_full_loader_does_not() -> None:
    halves = two([step(1, [0.1], loader=loader(16, 16))], [step(1, [0.1], rank=1, loader=loader(16, 16))])
    assert by_name(distributed_checks(halves, reference(), OPTIONS))["data sharded"].status == PASSED
    full = two([step(1, [0.1], loader=loader(16, 32))], [step(1, [0.1], rank=1, loader=loader(16, 32))])
    sharded = by_name(distributed_checks(full, reference(), OPTIONS))["data sharded"]
    assert sharded.status == FAILED
    assert sharded.detail == ("process 0 drew 512 samples per epoch from the loader iterated at train.py:12, "
                              "one process alone 512")
    assert sharded.meaning.startswith("every process sees all the data")


def test_a_loader_without_length_is_measured_by_a_finished_epoch_or_skipped() -> None:
    finished = two([step(1, [0.1], loader=loader(None, 32, (8,)))], [step(1, [0.1], rank=1, loader=loader(8, 32))])
    assert by_name(distributed_checks(finished, reference(), OPTIONS))["data sharded"].status == PASSED
    unknown = two([step(1, [0.1], loader=loader(None, 32))], [step(1, [0.1], rank=1, loader=loader(None, 32))])
    sharded = by_name(distributed_checks(unknown, reference(), OPTIONS))["data sharded"]
    assert sharded.status == SKIPPED and "has no length" in sharded.detail


def test_independent_copies_are_named() -> None:
    run = two([step(1, [0.1], wrapper=None)], [step(1, [0.2], wrapper=None, rank=1)])
    checks = by_name(distributed_checks(run, reference(), OPTIONS))
    wrapped = checks["model wrapped"]
    assert wrapped.detail == ("process 0 never wrapped the model: optimizer 0's 1 trained parameters are outside "
                              "any DistributedDataParallel")
    assert wrapped.meaning.startswith("the 2 processes trained independent copies")
    assert checks["parameters agree"].status == FAILED


def test_a_wrapper_whose_forward_never_ran_is_named() -> None:
    run = two([step(1, [0.1], forward_calls=0)], [step(1, [0.1], rank=1, forward_calls=0)])
    wrapped = by_name(distributed_checks(run, reference(), OPTIONS))["model wrapped"]
    assert wrapped.detail == "process 0 wrapped Net in DistributedDataParallel but never ran the wrapper's forward"


def test_a_process_outside_the_group_is_named() -> None:
    run = two([step(1, [0.1])], [step(1, [0.1], rank=1, joined=False)])
    group = by_name(distributed_checks(run, reference(), OPTIONS))["one process group"]
    assert group.status == FAILED and group.detail == "process 1 never joined a process group"


def test_non_finite_losses_fail() -> None:
    run = two([step(1, [0.1])], [step(1, [0.1], rank=1)], losses=([1.0], [float("nan")]))
    finite = by_name(distributed_checks(run, reference(), OPTIONS))["finite losses"]
    assert finite.status == FAILED and finite.detail == "process 1's loss at backward 1 is nan"


def test_a_hang_names_where_each_process_waits(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("a = 1\nwait()\nstep()\n", encoding="utf-8")

    def stack(line: int) -> str:
        return (f'Thread 0x2 (most recent call first):\n  File "/usr/lib/threading.py", line 1 in run\n\n'
                f'Current thread 0x1 (most recent call first):\n  File "/site/torch/c10d.py", line 9 in barrier\n'
                f'  File "{tmp_path}/train.py", line {line} in main\n')

    records = [ProcessRecord(0, 100, 1, stack=stack(2)), ProcessRecord(1, 101, 1, stack=stack(3))]
    run = outcome("distributed", records, folder=tmp_path, code=None, timed_out=True)
    finished = distributed_checks(run, reference(), OPTIONS)[0]
    assert finished.status == FAILED
    assert finished.detail == ("the run did not finish within 30 s: process 0 waits at train.py:2 in main: wait(); "
                               "process 1 waits at train.py:3 in main: step()")
    assert finished.meaning.startswith("a hang:")
    assert [rank for rank, _ in finished.stacks] == [0, 1]


# -- the report -------------------------------------------------------------------------------------------------------
def test_a_report_passes_only_when_every_check_passed() -> None:
    passed = CheckResult("a", "1 process", PASSED, "ok")
    skipped = CheckResult("b", "2 processes", SKIPPED, "no DataLoader")
    failed = CheckResult("c", "2 processes", FAILED, "process 1 never joined a process group", "trained alone")
    assert VerifyReport("t.py", "x", "converted", OPTIONS, (passed,)).passed
    unproven = VerifyReport("t.py", "x", "converted", OPTIONS, (passed, skipped))
    assert not unproven.passed and not unproven.failed
    assert unproven.verdict == "not verified: b: no DataLoader"
    broken = VerifyReport("t.py", "x", "converted", OPTIONS, (passed, failed, skipped))
    assert broken.failed and broken.first_failure is failed
    assert broken.verdict == "c: process 1 never joined a process group; trained alone"
    data = json.loads(json.dumps(broken.to_json()))
    assert data["passed"] is False and [c["status"] for c in data["checks"]] == [PASSED, FAILED, SKIPPED]
    assert data["options"]["steps"] == 3


def test_options_refuse_what_cannot_be_verified() -> None:
    for bad in ({"processes": 1}, {"steps": -1}, {"timeout": 0}):
        try:
            VerifyOptions(**bad)  # type: ignore[arg-type]
        except ValueError as error:
            assert str(error)
        else:
            raise AssertionError(f"VerifyOptions({bad}) was accepted")


def test_a_hand_written_update_without_an_optimizer_is_not_passed_on_parameters() -> None:
    joined = Group(True, 2, 0, "gloo")
    backwards = (Backward(1, 1.0, (), None, 0, joined), Backward(2, 0.9, (), None, 0, joined))
    alone = outcome("original", [ProcessRecord(0, 100, 1, backwards=backwards, exited=True)])
    one = by_name(one_process_checks(alone, alone, OPTIONS))
    assert one["same losses"].status == PASSED
    assert one["same parameters"].status == SKIPPED and "hand-written update" in one["same parameters"].detail
    records = [ProcessRecord(r, 100 + r, 1, backwards=tuple(Backward(b.n, b.loss, (), None, 0, Group(True, 2, r, "gloo"))
                                                            for b in backwards), exited=True) for r in (0, 1)]
    checks = by_name(distributed_checks(outcome("distributed", records), reference(), OPTIONS))
    assert checks["one process group"].status == PASSED  # known from the backward calls
    assert checks["model wrapped"].status == SKIPPED and checks["parameters agree"].status == SKIPPED


def test_allclose_agrees_with_torch_allclose_on_edge_values() -> None:
    """verify's own process compares fingerprints without torch; the verdicts are torch.allclose's (equal_nan)."""
    import torch

    from accelify.verify.compare import allclose

    nan, inf = float("nan"), float("inf")
    pairs = [([1.0], [1.0]), ([1.0], [1.00001]), ([nan], [nan]), ([nan], [1.0]), ([1.0], [nan]), ([inf], [inf]),
             ([inf], [-inf]), ([1.0], [inf]), ([inf], [1.0]), ([1e-8], [0.0]), ([0.0], [1e-6]),
             ([2.0, 3.0], [2.0, 3.1]), ([-1.0, 5.0], [-1.00000001, 5.00000002])]
    for a, b in pairs:
        for rtol, atol in ((1e-5, 1e-7), (1e-2, 1e-4)):
            expected = bool(torch.allclose(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64),
                                           rtol=rtol, atol=atol, equal_nan=True))
            assert allclose(a, b, rtol, atol) == expected, (a, b, rtol, atol)
    assert not allclose([1.0], [1.0, 2.0], 1e-5, 1e-7)


def test_a_small_loader_walked_whole_fails_and_an_uneven_share_passes() -> None:
    """brain-segmentation-pytorch's I3 run: 2 batches of 4, walked whole by both processes, passed as "8 of 8 samples"
    while a one-batch slack was allowed; sharded, each process walks ceil(B / n) batches (3 batches: 2 and 2)."""
    full = two([step(1, [0.1], loader=loader(2, 4))], [step(1, [0.1], rank=1, loader=loader(2, 4))])
    assert by_name(distributed_checks(full, reference(2, 4), OPTIONS))["data sharded"].status == FAILED
    half = two([step(1, [0.1], loader=loader(1, 4))], [step(1, [0.1], rank=1, loader=loader(1, 4))])
    assert by_name(distributed_checks(half, reference(2, 4), OPTIONS))["data sharded"].status == PASSED
    uneven = two([step(1, [0.1], loader=loader(2, 4))], [step(1, [0.1], rank=1, loader=loader(2, 4))])
    assert by_name(distributed_checks(uneven, reference(3, 4), OPTIONS))["data sharded"].status == PASSED


def test_split_odd_batches_count_as_sharded() -> None:
    """verify's exact runs split each batch of 25 rows: process 0 takes 13 rows of each of the 24 batches."""
    split = two([step(1, [0.1], loader=loader(24, 13))], [step(1, [0.1], rank=1, loader=loader(24, 12))])
    assert by_name(distributed_checks(split, reference(24, 25), OPTIONS))["data sharded"].status == PASSED


def test_a_loader_of_fewer_batches_than_processes_cannot_show_its_share() -> None:
    """205 samples in batches of 256: one process takes one short batch of 205; on 2 processes process 1 takes a
    padded batch of 256. "Drew 256 of 205" failed a right conversion (I9 with a small training set)."""
    padded = two([step(1, [0.1], loader=loader(1, 205))], [step(1, [0.1], rank=1, loader=loader(1, 256))])
    sharded = by_name(distributed_checks(padded, reference(1, 205), OPTIONS))["data sharded"]
    assert sharded.status == SKIPPED
    assert sharded.detail.startswith("the loader iterated at train.py:12 makes 1 batch per epoch, fewer than the 2")
