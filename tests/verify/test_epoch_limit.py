"""The epoch limit (``--batches K --epochs E``): every DataLoader epoch ends after K batches, ``len(loader)`` says K,
and a run ends when its training loader starts epoch E + 1, so what a program does at an epoch's end runs under
verify; a loader the script wraps (``itertools.cycle``) ends at the limit's step cap instead. The planted cases
``epoch_end_*`` (20-batch epochs, a defect in the epoch-end validation) are failed through it in test_planted.py;
here, the same case under a step limit of 3 says that it saw no epoch's end.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from corpus_cases import PlantedCase
from verification_pool import VerificationPool

from accelify.cli.verify import _limits
from accelify.verify import VerifyOptions, verify_files
from accelify.verify.hook.accelify_verify_loaders import LoaderEvents
from accelify.verify.report import PASSED
from accelify.verify.runner import RunOutcome, RunSpec

EPOCHS = '''\
import itertools
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(160, 4), torch.randn(160, 1)), batch_size=8, shuffle=True)
valid = DataLoader(TensorDataset(torch.randn(80, 4), torch.randn(80, 1)), batch_size=8)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.5)
if sys.argv[1] == "cycle":
    batches = itertools.cycle(train)
    for step in range(1000):
        x, y = next(batches)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
for epoch in range(10):
    trained = 0
    for x, y in train:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        trained += 1
    validated = sum(1 for _ in valid)
    scheduler.step()
    print(f"epoch {epoch}: trained {trained} of {len(train)}, validated {validated} of {len(valid)}")
print("finished")
'''


def _run(pool: VerificationPool, tmp_path: Path, mode: str) -> RunOutcome:
    folder = tmp_path / mode
    folder.mkdir()
    (folder / "train.py").write_text(EPOCHS, encoding="utf-8")
    spec = RunSpec("test", folder, "train.py", tmp_path / f"logs-{mode}", args=(mode,), batches=3, epochs=2,
                   timeout=60)
    return pool.submit(f"epoch-limit/{tmp_path}/{mode}", lambda: pool.launcher.run(spec)).result()


@pytest.mark.multiprocess
def test_each_epoch_ends_after_the_batch_limit_and_the_run_after_the_epochs(verification_pool: VerificationPool,
                                                                           tmp_path: Path) -> None:
    run = _run(verification_pool, tmp_path, "epochs")
    assert run.exit_code == 0, run.stderr
    assert run.stdout[0].splitlines() == ["epoch 0: trained 3 of 3, validated 3 of 3",
                                          "epoch 1: trained 3 of 3, validated 3 of 3"]
    record = run.records[0]
    assert record.stopped and record.stop_reason == "epochs" and record.ending == "stopped at the epoch limit"
    assert len(record.steps) == 6
    assert [step.lrs for step in record.steps] == [(0.1,)] * 3 + [(0.05,)] * 3  # the per-epoch scheduler stepped
    training = [loader for loader in record.loaders.values() if loader.training]
    # as of the last step (the second epoch ends after it): len() said 3, the first epoch ended after 3 batches
    assert [(loader.length, loader.epoch_draws) for loader in training] == [(3, (3,))]


@pytest.mark.multiprocess
def test_a_wrapped_loader_ends_at_the_step_cap(verification_pool: VerificationPool, tmp_path: Path) -> None:
    run = _run(verification_pool, tmp_path, "cycle")
    assert run.exit_code == 0, run.stderr
    record = run.records[0]
    assert record.stop_reason == "backstop" and len(record.steps) == 3 * (2 + 1)  # K x (E + 1), one optimizer
    assert "finished" not in run.stdout[0]


def test_a_loader_sharded_with_whole_batches_holds_its_share_of_the_limit() -> None:
    limits = LoaderEvents()
    limits.batch_limit = 5  # type: ignore[attr-defined]
    assert limits.loader_limit(SimpleNamespace()) == 5  # a plain DataLoader, or one prepared whole (exact mode)
    assert limits.loader_limit(SimpleNamespace(num_processes=2, split_batches=False)) == 3  # a real launch: ceil
    assert limits.loader_limit(SimpleNamespace(num_processes=2, split_batches=True)) == 5  # a slice of each batch
    hugging_face = SimpleNamespace(batch_sampler=SimpleNamespace(num_processes=4, split_batches=False))
    assert limits.loader_limit(hugging_face) == 2  # Accelerate's DataLoaderShard: its BatchSamplerShard says
    limits.batch_limit = 0  # type: ignore[attr-defined]
    assert limits.loader_limit(SimpleNamespace()) is None


def test_the_command_line_limits() -> None:
    """No limit given: 2 epochs of 5 batches; --steps alone: the step limit alone, as before the epoch limit."""
    assert _limits(None, None, None) == (0, 5, 2)
    assert _limits(3, None, None) == (3, 0, 0)
    assert _limits(0, None, None) == (0, 0, 0)  # --steps 0: the script to its end
    assert _limits(None, 3, None) == (0, 3, 2)
    assert _limits(None, 0, 4) == (0, 0, 0)
    assert _limits(20, 3, 1) == (20, 3, 1)
    assert VerifyOptions(steps=0, batches=3, epochs=2).limit == "2 epochs of 3 batches"
    assert VerifyOptions(steps=4).limit == "4 steps"
    with pytest.raises(ValueError, match="needs a batch limit"):
        VerifyOptions(epochs=2)


@pytest.mark.multiprocess
def test_a_step_limit_below_one_epoch_says_it_saw_no_epoch_end(verification_pool: VerificationPool) -> None:
    """The planted 1/N validation accuracy, under --steps 3 alone: its validation never runs, and the printed-values
    check, which compared nothing, says why instead of passing silently (with the epoch limit it fails:
    test_planted.py)."""
    case = PlantedCase.load("epoch_end_accuracy_share")
    options = VerifyOptions(steps=3, processes=2, timeout=case.timeout)
    report = verification_pool.submit("epoch-limit/steps-only", lambda: verify_files(
        case.original(), case.converted(), options=options, launcher=verification_pool.launcher,
        concurrent=False)).result()
    printed = report.check("same printed values")
    assert printed.status == PASSED and "no number printed outside a batch loop" in printed.detail
    assert "the step limit ended the runs before any training epoch ended" in printed.detail
