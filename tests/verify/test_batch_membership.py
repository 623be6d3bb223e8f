"""Verify's static look for evaluation losses that depend on which samples share a batch (set J's J3): exact mode
cannot reproduce them, so such a program is run as a real launch."""

from __future__ import annotations

from textwrap import dedent

from accelify.verify.batch_membership import explain, membership_losses
from accelify.verify.workspace import ScriptFiles

EVALUATE = dedent("""
    import torch


    def evaluate(model, loader, loss_fn, accelerator):
        total = 0.0
        with torch.no_grad():
            for x, y in loader:
                total += loss_fn(model(x), y).item()
            total = accelerator.reduce(torch.tensor(total, device=accelerator.device), "sum").item()
        return total / len(loader)
    """)


def test_a_per_process_loss_reduced_after_an_evaluation_loop_is_found() -> None:
    found = membership_losses(ScriptFiles("train.py", EVALUATE))
    assert found == ["train.py:9"], found
    assert "train.py:9 adds up a loss computed on each process's own batches" in explain(found, 2)


def test_gathered_losses_training_loops_and_other_sums_are_not() -> None:
    gathered = EVALUATE.replace(
        "            total += loss_fn(model(x), y).item()\n",
        "            out, y = accelerator.gather_for_metrics((model(x), y))\n"
        "            total += loss_fn(out, y).item()\n").replace(
        "        total = accelerator.reduce(torch.tensor(total, device=accelerator.device), \"sum\").item()\n", "")
    assert gathered.count("gather_for_metrics") == 1 and "reduce" not in gathered
    assert membership_losses(ScriptFiles("train.py", gathered)) == []
    training = EVALUATE.replace("total += loss_fn(model(x), y).item()",
                                "loss = loss_fn(model(x), y)\n            accelerator.backward(loss)\n"
                                "            total += loss.item()")
    assert membership_losses(ScriptFiles("train.py", training)) == []  # exact mode's split mean is the batch's
    counts = EVALUATE.replace("loss_fn(model(x), y).item()", "(model(x).argmax(1) == y).sum().item()")
    assert membership_losses(ScriptFiles("train.py", counts)) == []
