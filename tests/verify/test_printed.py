"""The printed-values check on hand-made records: aggregates printed after an epoch must equal the original's;
per-step values, the last step's loss printed after a loop, and numbers that vary between runs are not compared."""

from __future__ import annotations

from accelify.verify.printed import LOGGED, RETURNED, numbers, printed_check, template
from dataclasses import replace

from accelify.verify.records import Backward, Group, PrintedLine, ProcessRecord, ReduceMark, Step
from accelify.verify.report import FAILED, PASSED, SKIPPED


def record(*lines: tuple[str, bool], losses: tuple[float, ...] = (1.0,)) -> ProcessRecord:
    """A process that took one backward per loss, then printed ``lines`` ((text, inside an epoch))."""
    backwards = tuple(Backward(i + 1, loss, (), None, i) for i, loss in enumerate(losses))
    printed = tuple(PrintedLine(text, "train.py:9", inside, len(backwards), len(backwards)) for text, inside in lines)
    return ProcessRecord(rank=0, pid=1, ppid=0, backwards=backwards, lines=printed, exited=True)


def judge(original: ProcessRecord, run: ProcessRecord, control: ProcessRecord | None = None):
    return printed_check(run, original, control or original, 2)


def test_numbers_keep_values_and_leave_out_names_times_and_clocks() -> None:
    found = numbers("epoch 3/10 conv1 loss: -0.125 lr=1e-3 took 0.52s 12 ms at 12:03:44")
    assert [(n.text, n.comparable) for n in found] == [
        ("3", True), ("10", True), ("1", False), ("-0.125", True), ("1e-3", True), ("0.52", False), ("12", False),
        ("12", False), ("03", False), ("44", False)]
    assert [n.unit for n in numbers("0.125 1.5e-03 456")] == [0.001, 0.0001, 1.0]
    assert template("loss -0.5 acc 91.25%") == template("loss 0.25 acc 90.00%") == "loss # acc #%"


def test_equal_aggregates_pass_within_one_unit_of_the_last_printed_digit() -> None:
    original = record(("epoch 0 loss 0.123456", False), ("test accuracy 91.25%", False))
    run = record(("epoch 0 loss 0.123457", False), ("test accuracy 91.25%", False))
    check = judge(original, run)
    assert check.status == PASSED and "3 numbers in 2 lines" in check.detail


def test_an_average_over_one_shard_is_named_one_nth_of_the_original() -> None:
    check = judge(record(("epoch 1 train loss 4.5000", False)), record(("epoch 1 train loss 2.2100", False)))
    assert check.status == FAILED and "'epoch 1 train loss 4.5000'" in check.detail and "train.py:9" in check.detail
    assert "about 1/2 of the original" in check.meaning and "reduce" in check.meaning


def test_a_metric_of_process_0s_share_is_named_so() -> None:
    check = judge(record(("accuracy 59.38% (76/128)", False)), record(("accuracy 60.94% (39/64)", False)))
    assert check.status == FAILED and "59.38 vs 60.94" in check.detail
    assert "process 0's share" in check.meaning


def test_values_printed_inside_a_batch_loop_are_per_step_and_not_compared() -> None:
    check = judge(record(("step 1 loss 0.9", True)), record(("step 1 loss 0.4", True)))
    assert check.status == PASSED and "no number printed outside a batch loop" in check.detail


def test_the_last_steps_loss_printed_after_the_loop_is_not_compared() -> None:
    original = record(("epoch 0 loss 0.812000", False), losses=(0.9, 0.812))
    run = record(("epoch 0 loss 0.700000", False), losses=(0.8, 0.7))  # process 0's share of the last batch
    check = judge(original, run)
    assert check.status == PASSED and "1 last-step loss printed after a loop" in check.detail
    other = record(("epoch 0 loss 0.650000", False), losses=(0.8, 0.7))  # not the last backward's loss
    assert judge(original, other).status == FAILED


def test_the_losses_of_a_step_with_two_backwards_printed_after_the_loop_are_not_compared() -> None:
    """A GAN's ``d_loss`` (the backward before the last) and ``g_loss`` (the last), both printed after the epoch."""
    original = record(("epoch 0 d 1.300000 g 0.800000", False), losses=(1.4, 0.9, 1.3, 0.8))
    run = record(("epoch 0 d 1.100000 g 0.700000", False), losses=(1.2, 0.85, 1.1, 0.7))
    check = judge(original, run)
    assert check.status == PASSED and "2 last-step losses printed after a loop" in check.detail
    other = record(("epoch 0 d 1.150000 g 0.700000", False), losses=(1.2, 0.85, 1.1, 0.7))  # d: no loss of the step
    assert judge(original, other).status == FAILED


def test_numbers_that_differ_between_two_one_process_runs_are_not_compared() -> None:
    original = record(("epoch 0 done, run id 81723, loss 0.5", False))
    control = record(("epoch 0 done, run id 11872, loss 0.5", False))
    run = record(("epoch 0 done, run id 99341, loss 0.5", False))
    check = judge(original, run, control)
    assert check.status == PASSED and "1 number that differs between two one-process runs" in check.detail


def test_lines_only_one_run_printed_are_skipped_and_the_rest_still_matched() -> None:
    original = record(("epoch 0 acc 0.5", False), ("epoch 1 acc 0.75", False))
    run = record(("using 2 processes", False), ("epoch 0 acc 0.5", False), ("epoch 1 acc 0.25", False))
    check = judge(original, run)
    assert check.status == FAILED and "'epoch 1 acc 0.75'" in check.detail


def test_lines_printed_after_a_step_exact_mode_could_not_make_exact_are_not_compared() -> None:
    uneven = Step(1, 0, (), Group(True, 2, 0, "gloo"), (), {}, 1, inexact=("a batch of 25 rows does not split evenly",))
    original = record(("epoch 0 val_loss 0.317", False))
    run = replace(record(("epoch 0 val_loss 0.314", False)), steps=(uneven,))
    check = judge(original, run)
    assert check.status == SKIPPED and "not exact from step 1 on (a batch of 25 rows" in check.detail


def test_an_aggregate_that_differs_between_the_processes_fails_even_where_the_original_cannot_be_compared() -> None:
    uneven = Step(1, 0, (), Group(True, 2, 0, "gloo"), (), {}, 1, inexact=("a batch of 25 rows does not split evenly",))
    original = record(("epoch 0 val_loss 0.317", False))
    run = replace(record(("epoch 0 val_loss 0.314", False)), steps=(uneven,))
    reduced = replace(record(("epoch 0 val_loss 0.314", False)), rank=1)  # accelerator.print's silent line
    assert printed_check(run, original, original, 2, (reduced,)).status == SKIPPED
    share = replace(record(("epoch 0 val_loss 0.322", False)), rank=1)
    check = printed_check(run, original, original, 2, (share,))
    assert check.status == FAILED and "process 1 'epoch 0 val_loss 0.322'" in check.detail
    assert "process 0's share" in check.meaning


def channel_record(*lines: tuple[str, str], rank: int = 0, loss: float = 0.9) -> ProcessRecord:
    """A process that took one backward (``loss``), then logged or returned ``lines`` ((text, via))."""
    printed = tuple(PrintedLine(text, "train.py:5", False, 1, 1, via=via) for text, via in lines)
    return replace(record(losses=(loss,)), lines=printed, rank=rank)


def test_logged_and_returned_values_are_compared_in_their_own_checks_with_their_cause() -> None:
    original = channel_record(("test/accuracy 0.59375", "add_scalar"), ("evaluate() -> 0.59375", "return"))
    run = channel_record(("test/accuracy 0.59375", "add_scalar"), ("evaluate() -> 0.296875", "return"), loss=0.7)
    assert printed_check(run, original, original, 2).detail.startswith("no number printed")
    logged = printed_check(run, original, original, 2, channel=LOGGED)
    assert logged.status == PASSED and "1 number in 1 line logged after an epoch" in logged.detail
    returned = printed_check(run, original, original, 2, channel=RETURNED)
    assert returned.status == FAILED and returned.name == "same returned values"
    assert "the original returned 'evaluate() -> 0.59375', process 0 of 2 returned 'evaluate() -> 0.296875'" in \
        returned.detail
    assert "about 1/2 of the original" in returned.meaning and "before dividing and returning it" in returned.meaning


def test_a_logged_value_that_differs_between_the_processes_names_the_tracker() -> None:
    original = channel_record(("val/loss 0.5", "accelerator.log"))
    peer = channel_record(("val/loss 0.75", "accelerator.log"), rank=1)
    check = printed_check(original, original, original, 2, (peer,), channel=LOGGED)
    assert check.status == FAILED and "(with accelerator.log)" in check.detail
    assert "this logged value is process 0's share" in check.meaning


def test_values_handed_over_as_numbers_get_no_printed_digit_slack() -> None:
    original = channel_record(("correct 76.0", "add_scalar"), ("correct 76.0", "logging"))
    run = channel_record(("correct 76.05", "add_scalar"), ("correct 76.05", "logging"))
    check = printed_check(run, original, original, 2, channel=LOGGED)
    assert check.status == FAILED and "(with add_scalar)" in check.detail  # as text (logging) it would pass
    assert printed_check(channel_record(("correct 76.05", "logging")), channel_record(("correct 76.0", "logging")),
                         channel_record(("correct 76.0", "logging")), 2, channel=LOGGED).status == PASSED


def test_late_in_a_long_run_only_a_factor_n_differs_from_the_original() -> None:
    """After ``COMPARED_STEPS`` optimizer steps two exact runs drift apart (Adam): 1.3 % is drift, 1/N is still wrong,
    and a share's value is still caught between the processes."""
    from accelify.verify.exactness import COMPARED_STEPS

    def late(text: str, rank: int = 0) -> ProcessRecord:
        return replace(record((text, False), losses=(1.0,) * (COMPARED_STEPS + 1)), rank=rank)

    original = late("epoch 12 train loss 4.5000")
    assert judge(original, late("epoch 12 train loss 4.4400")).status == PASSED
    check = judge(original, late("epoch 12 train loss 2.2100"))
    assert check.status == FAILED and "about 1/2 of the original" in check.meaning
    early = record(("epoch 0 train loss 4.5000", False))
    assert judge(early, record(("epoch 0 train loss 4.4400", False))).status == FAILED  # early: no drift allowed
    twice = lambda first, then: replace(first, lines=first.lines + late(then).lines)  # noqa: E731
    assert judge(twice(original, "epoch 13 train loss 3.0000"),
                 twice(late("epoch 12 train loss 4.4400"), "epoch 13 train loss 5.0400")).status == PASSED  # drift
    share = printed_check(late("epoch 12 train loss 4.4400"), original, original, 2,
                          (late("epoch 12 train loss 4.5600", 1),))
    assert share.status == FAILED and "process 0's share" in share.meaning


def _reduced(text: str, op: str, value: float, batch_sum: bool = True) -> ProcessRecord:
    """Process 0 printed ``text`` right after reducing ``value`` with ``op`` (a sum of per-batch means, or not)."""
    return replace(record((text, False), losses=(0.77,)), reduces=(ReduceMark(op, (value,), (batch_sum,), 1),))


def test_a_sum_of_per_batch_means_reduced_with_sum_is_judged_as_a_real_launch_computes_it() -> None:
    """Exact mode walks every batch on every process: a sum of per-batch mean losses reduced with "sum" prints N
    times the original there, and the original's value in a real launch, where each process has 1/N of the
    batches. The recorder marks such a reduce; the printed value is judged at 1/N."""
    original = record(("epoch 0 loss sum 6.400000", False), losses=(0.3,))  # not the last step's loss (below)
    right = judge(original, _reduced("epoch 0 loss sum 12.800000", "sum", 12.8))
    assert right.status == PASSED, right.detail
    assert "1 sum of per-batch means reduced over the processes judged as a real launch computes it" in right.detail
    # not such a sum: N times the original, a bug
    unmarked = judge(original, record(("epoch 0 loss sum 12.800000", False), losses=(0.77,)))
    assert unmarked.status == FAILED and "about 2x the original" in unmarked.meaning


def test_a_sum_of_per_batch_means_reduced_with_mean_is_one_nth_in_a_real_launch() -> None:
    """Exact mode prints the original's value for it; a real launch 1/N: it fails, saying so."""
    original = record(("epoch 0 loss sum 6.400000", False), losses=(0.3,))
    check = judge(original, _reduced("epoch 0 loss sum 6.400000", "mean", 6.4))
    assert check.status == FAILED, check.detail
    assert "reduced with 'mean': a real launch, where each process sums the means of 1/2 of the batches" \
        in check.detail and "printed 3.2" in check.detail
    assert "in a real launch the value is about 1/2 of the original" in check.meaning
    assert "accelerator.reduce(total, 'sum')" in check.meaning


def test_a_mark_for_another_value_or_step_leaves_a_printed_value_as_it_is() -> None:
    original = record(("epoch 0 loss sum 6.400000", False), losses=(0.3,))
    other = judge(original, _reduced("epoch 0 loss sum 12.800000", "sum", 3.0))
    later = judge(original, replace(_reduced("epoch 0 loss sum 12.800000", "sum", 12.8),
                                    reduces=(ReduceMark("sum", (12.8,), (True,), 0),)))
    assert other.status == later.status == FAILED and "about 2x the original" in other.meaning


def test_a_number_printed_too_coarsely_is_not_taken_for_a_reduced_sum() -> None:
    """``Epoch 3: train loss 0.1589``: the epoch number 3 is not the reduced sum 3.02 printed as an integer."""
    original = record(("Epoch 3: train loss 0.1589", False), losses=(0.3,))
    run = replace(record(("Epoch 3: train loss 0.1589", False), losses=(0.77,)),
                  reduces=(ReduceMark("mean", (3.02,), (True,), 1),))
    check = judge(original, run)
    assert check.status == PASSED and "judged as a real launch" not in check.detail, check.detail
