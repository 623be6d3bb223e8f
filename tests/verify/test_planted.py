"""Wrong conversions are caught: ``accelify verify`` fails every planted one with the right verdict.

Each ``tests/verify/planted/<name>/`` holds an ``original.py``, a ``converted.py`` that is wrong in one way, and
``case.toml`` naming the check that must fail first, with words its detail and its meaning must contain; the right
conversion, ``right.py`` where the case has one, must verify.
"""

from __future__ import annotations

import pytest
from corpus_cases import PLANTED, PLANTED_IDS, RIGHT_IDS, SCRIPT, PlantedCase
from verification_pool import VerificationPool

from accelify.verify import ScriptFiles, VerifyOptions, VerifyReport, verify_files
from accelify.verify.report import FAILED, PASSED, SKIPPED

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("planted", PLANTED_IDS)
def test_planted_wrong_conversion_fails_with_its_verdict(verification_pool: VerificationPool, planted: str) -> None:
    case = PlantedCase.load(planted)
    report = verification_pool.planted(planted)
    summary = "\n".join(f"{c.stage}: {c.name}: {c.status}: {c.detail}" for c in report.checks)
    failure = report.first_failure
    assert failure is not None, f"{planted} ({case.description}) passed verify:\n{summary}"
    assert failure.name == case.check, f"{planted}: expected {case.check!r} to fail first:\n{summary}"
    assert case.detail in failure.detail, summary
    assert case.meaning in failure.meaning, failure.meaning
    assert case.check in report.verdict and case.meaning in report.verdict
    assert not report.passed


@pytest.mark.parametrize("planted", RIGHT_IDS)
def test_right_conversion_of_planted_case_verifies(verification_pool: VerificationPool, planted: str) -> None:
    report = verification_pool.planted_right(planted)
    summary = "\n".join(f"{c.stage}: {c.name}: {c.status}: {c.detail}" for c in report.checks)
    assert report.passed, f"planted/{planted}/right.py: {report.verdict}\n{summary}"


def test_every_planted_case_fails_in_its_own_check() -> None:
    """The planted corpus covers each distributed failure verify names, and the one-process comparison (a hang is
    caught first by the static check; the run's own hang check is tested below, on the same case)."""
    checks = {PlantedCase.load(name).check for name in PLANTED_IDS}
    assert {"same losses", "one process group", "model wrapped", "data sharded", "parameters agree",
            "no latent deadlock", "same data", "same schedule"} <= checks


def test_a_hang_names_where_each_process_waits_and_keeps_their_stacks(verification_pool: VerificationPool) -> None:
    report = verification_pool.planted("wait_in_local_branch")
    hang = report.check("finished in time")
    assert hang.status == FAILED
    assert [rank for rank, _ in hang.stacks] == [0, 1]
    assert all("train.py" in stack and "most recent call first" in stack for _, stack in hang.stacks)
    assert "process 1 waits at train.py:22 in main: accelerator.backward(loss)" in hang.detail
    assert report.check("same losses").status == PASSED  # on one process the branch cannot hang
    distributed = report.run("distributed")
    assert distributed is not None and distributed.timed_out and distributed.exit_code is None


def _exact_limit(pool: VerificationPool, name: str) -> tuple[VerifyReport, str]:
    """Verify ``exact_limits/<name>``'s right conversion against its original (4 steps, 2 processes): the report, and
    its checks one per line for a failure message."""
    folder = PLANTED.parent / "exact_limits" / name
    original, converted = (ScriptFiles(SCRIPT, (folder / f"{part}.py").read_text(encoding="utf-8"))
                           for part in ("original", "converted"))
    options = VerifyOptions(steps=4, processes=2, timeout=120)
    report = pool.submit(f"exact-limits/{name}", lambda: verify_files(
        original, converted, options=options, launcher=pool.launcher, concurrent=False)).result()
    return report, "\n".join(f"{c.stage}: {c.name}: {c.status}: {c.detail}" for c in report.checks)


def test_a_script_that_sizes_state_by_the_full_batch_is_judged_on_a_normal_run(
        verification_pool: VerificationPool) -> None:
    """Exact mode's split batches break ``torch.zeros(BATCH_SIZE, 8)`` though a real launch runs: verify says why the
    exact checks could not run and judges a normal N-process run instead of calling the conversion wrong."""
    report, summary = _exact_limit(verification_pool, "full_batch")
    assert not report.failed, summary
    same = report.check("same as original")
    assert same.status == SKIPPED and same.detail.startswith("the exact check could not run: train.py:"), summary
    assert "sizes a tensor by the full batch (batch_size=32) while each process holds 16 rows" in same.detail
    assert same.detail.endswith("the normal 2-process run was checked instead")
    assert report.check("same returned values").detail == same.detail
    for name in ("finished in time", "model wrapped", "data sharded", "parameters agree"):
        assert report.check(name).status == PASSED, summary
    distributed = report.run("distributed")
    assert distributed is not None and distributed.exit_code == 0 and distributed.steps == (4, 4)
    assert report.verdict.startswith("not verified: ") and "the exact check could not run" in report.verdict


def test_a_small_batch_level_loss_term_is_not_taken_for_a_mean(verification_pool: VerificationPool) -> None:
    """Field K3 (PointNet): ``cross_entropy(out, y) + 0.001 * norm(A Aᵀ - I)`` over the stacked batch. Exact mode's
    halves add up to within 5 % of twice the original's loss, so the loss was taken for a mean and the right
    conversion FAILED "same as original" by the regulariser's share (set L's conv VAE, a KL sum over a constant batch
    size beside a mean, too). The processes' losses must meet a mean or a sum to rounding now (1e-5): this one is
    neither, the step is marked inexact and the check is skipped, saying why."""
    report, summary = _exact_limit(verification_pool, "batch_level_term")
    assert not report.failed, summary
    same = report.check("same as original")
    assert same.status == SKIPPED and "neither the mean nor the sum over the batch's rows" in same.detail, summary
    for name in ("model wrapped", "data sharded", "parameters agree"):
        assert report.check(name).status == PASSED, summary


def test_noise_drawn_in_place_into_a_batch_shaped_tensor_is_the_originals(verification_pool: VerificationPool) -> None:
    """``eps = std.new(std.size()).normal_()`` (set L's conv VAE): exact mode draws it for the whole batch and keeps
    the share's rows, as it does for ``torch.randn``, so a right conversion is compared step by step and passes."""
    report, summary = _exact_limit(verification_pool, "inplace_noise")
    assert report.check("same as original").status == PASSED, summary


def test_float32_rounding_of_a_right_conversion_is_not_called_wrong(verification_pool: VerificationPool) -> None:
    """A BatchNorm network trained hard: from step 2 on, process 0's float32 gradients round differently from the
    original's (its parameters differ in their last bits), by more than the elementwise tolerance on small values
    (pytorch-cifar100's ResNet18 failed 'same as original' so; in float64 the same runs agree to 1e-14). What each
    step adds to the difference is a small share of that step's update: verify passes it and says so."""
    report, summary = _exact_limit(verification_pool, "float32_rounding")
    assert report.passed, summary
    same = report.check("same as original")
    assert same.status == PASSED and "after each of 4 steps" in same.detail, summary


def test_an_evaluation_over_an_uneven_last_batch_keeps_the_run_exact(verification_pool: VerificationPool) -> None:
    """Exact mode pads the 5-row last test batch to 3 + 3 rows: ``gather_for_metrics`` drops the wrapped-around row
    (as a real launch drops its duplicate), and the padding marks no training step inexact, since no backward used it:
    every step and every printed line is compared with the original."""
    report = verification_pool.planted_right("eval_last_batch_uneven")
    summary = "\n".join(f"{c.stage}: {c.name}: {c.status}: {c.detail}" for c in report.checks)
    same = report.check("same as original")
    assert same.status == PASSED and "not exact" not in same.detail, summary
    printed = report.check("same printed values")
    assert printed.status == PASSED and " in 3 lines " in printed.detail and "not exact" not in printed.detail, summary
