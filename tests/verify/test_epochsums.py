"""Exact mode's sums of per-batch means (``accelify_verify_epochsums``), in this process: which reduced values are
such sums, and which are not (a loader that splits its batches in a real launch too, one batch, a divided sum)."""

from __future__ import annotations

from accelify.verify.hook.accelify_verify_epochsums import EpochSums


def test_a_reduced_value_is_a_sum_of_the_epochs_per_batch_means() -> None:
    sums = EpochSums()
    sums.epoch(0)
    for loss in (0.5, 0.25, 0.125):
        sums.batch(0)
        sums.mean_loss(loss)  # the batch's first mean loss ...
        sums.mean_loss(9.0)  # ... not a second one on the same batch
        sums.mean_backward(loss)
    assert sums.is_batch_sum(0.875) and sums.is_batch_sum(0.875 * (1 + 5e-6))  # a float32 tensor's sum
    assert not sums.is_batch_sum(0.875 / 3) and not sums.is_batch_sum(0.88)  # a per-process average, another value
    sums.epoch(0)  # the next epoch starts again
    assert not sums.is_batch_sum(0.875)


def test_a_loader_that_splits_in_a_real_launch_and_a_single_batch_are_left_out() -> None:
    sums = EpochSums()
    sums.batch(1)  # loader 1 (split_batches=True) never starts an epoch here: its means are not summed
    sums.mean_backward(0.5)
    sums.batch(1)
    sums.mean_backward(0.5)
    assert not sums.is_batch_sum(1.0)
    sums.epoch(0)
    sums.batch(0)
    sums.mean_backward(0.5)  # one batch: its sum is its mean
    assert not sums.is_batch_sum(0.5)
