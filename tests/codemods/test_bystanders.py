"""A function the training never calls, or a pass over data that trains nothing, does not decide whether the
training converts: its own DataLoader is left unprepared (every process walks all of it, as before)."""

from __future__ import annotations

import pytest
from _convert import dedent

from accelify.pipeline import convert_source
from accelify.program import ModuleText

STATS = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_dataset(n):
    x = torch.arange(n * 4, dtype=torch.float32).view(n, 4)
    return TensorDataset(x, x.sum(1, keepdim=True))


def compute_mean_std(dataset):
    loader = DataLoader(dataset, batch_size=64)
    total, count = 0.0, 0
    for x, _ in loader:
        total += x.sum(0)
        count += x.size(0)
    return total / count, len(loader)
"""
TRAIN = """\
import torch
from torch.utils.data import DataLoader
from data import compute_mean_std, make_dataset


def main():
    ds = make_dataset(128)
{call}    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
"""


@pytest.mark.parametrize("call", ["", "    mean, n = compute_mean_std(ds)\n"], ids=["never-called", "called-first"])
def test_a_statistics_pass_in_a_helper_module_does_not_block(call: str) -> None:
    result = convert_source(TRAIN.format(call=call), modules=[ModuleText("data", "data.py", STATS)])
    assert result.status == "converted", [w.format() for w in result.warnings]
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in result.new
    assert not result.companions  # data.py is left as it is: its loader stays whole on every process
    assert result.warnings == ()


def test_a_returned_loader_is_still_prepared() -> None:
    """Handed on, the loader may be trained on: it is prepared where it is received, as before."""
    helper = STATS.replace("    return total / count, len(loader)\n", "    return loader\n")
    code = TRAIN.format(call="").replace("    for x, y in loader:", "    held = compute_mean_std(ds)\n    for x, y in loader:")
    result = convert_source(code, modules=[ModuleText("data", "data.py", helper)])
    assert "accelerator.prepare(model, optimizer, loader, held)" in result.new


def test_a_pass_that_runs_the_model_without_training_does_not_decide_the_conversion() -> None:
    """An evaluation over a loader of its own, with the model, out of prepare's reach: left as it is (every process
    evaluates all of it, the same numbers), and the training converts (class 11: it was refused with ACC014)."""
    helper = STATS.replace("def compute_mean_std(dataset):", "def compute_mean_std(dataset, model):").replace(
        "        total += x.sum(0)\n", "        total += model(x).sum(0)\n"
    )
    code = TRAIN.format(call="").replace("    for x, y in loader:", "    held = compute_mean_std(ds, model)\n    for x, y in loader:")
    result = convert_source(code, modules=[ModuleText("data", "data.py", helper)])
    assert result.status == "converted"
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n    held = compute_mean_std(ds, model)" in result.new
    assert not result.companions and not result.warnings


def test_an_evaluation_loader_built_in_a_training_callback_does_not_block_the_training() -> None:
    """minGPT's adder: ``eval_split`` (its own DataLoader) runs from the trainer's on_batch_end callback."""
    code = dedent(
        """
        import torch
        from torch.utils.data import DataLoader
        class Trainer:
            def __init__(self, model, train_dataset):
                self.model, self.train_dataset, self.callbacks = model, train_dataset, []
            def run(self):
                model = self.model
                self.optimizer = torch.optim.AdamW(model.parameters())
                train_loader = DataLoader(self.train_dataset, batch_size=8, shuffle=True)
                for x, y in train_loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    self.optimizer.step()
                    for cb in self.callbacks:
                        cb(self)
        if __name__ == '__main__':
            model = torch.nn.Linear(4, 1)
            trainer = Trainer(model, train_dataset)
            def eval_split(trainer, split):
                loader = DataLoader({'train': train_dataset, 'test': test_dataset}[split], batch_size=16)
                for x, y in loader:
                    print(torch.nn.functional.mse_loss(model(x), y).item())
            def batch_end_callback(trainer):
                with torch.no_grad():
                    eval_split(trainer, 'test')
            trainer.callbacks.append(batch_end_callback)
            trainer.run()
        """
    )
    result = convert_source(code)
    assert result.status == "converted", [w.message for w in result.warnings]
    assert "model, self.optimizer, train_loader = self.accelerator.prepare(" in result.new
    assert "loader = DataLoader({'train'" in result.new and "prepare(loader)" not in result.new


SANITY = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def sanity_check():
    \"\"\"Overfit one batch (run by hand when debugging).\"\"\"
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        opt.zero_grad()
        model(torch.ones(8, 4)).pow(2).mean().backward()
        opt.step()


def main():
    loader = DataLoader(TensorDataset(torch.ones(64, 4), torch.ones(64, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


{entry}
"""


def test_a_function_the_training_never_calls_does_not_decide() -> None:
    """``sanity_check`` builds a model and an optimizer of its own but nothing calls it: the training converts (its
    own backward, out of the accelerator's reach, is reported), where before the file was refused (ACC014)."""
    result = convert_source(SANITY.format(entry='if __name__ == "__main__":\n    main()'))
    assert result.status == "converted"
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in result.new
    assert "        model(torch.ones(8, 4)).pow(2).mean().backward()\n" in result.new
    assert [w.code for w in result.warnings] == ["ACC009"]


def test_called_it_counts_again() -> None:
    result = convert_source(SANITY.format(entry='if __name__ == "__main__":\n    sanity_check()\n    main()'))
    # both run, one after the other, each training a model of its own: each prepares its own (was ACC039, and
    # ACC014 before that), with the one accelerator made where both are called
    assert result.status == "converted" and result.warnings == ()
    assert "    model, opt = accelerator.prepare(model, opt)\n" in result.new
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in result.new
    assert 'if __name__ == "__main__":\n    accelerator = Accelerator(cpu=True)\n    sanity_check()' in result.new
