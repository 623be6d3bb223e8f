"""SaveOnMain, LoadUnwrapped, EndTraining."""

from __future__ import annotations

import pytest
from _convert import assert_converts, converted

HEAD = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
PREPARED = "model, opt = accelerator.prepare(model, opt)\n"


def test_checkpoint_saves_and_loads() -> None:
    assert_converts(
        """
        import torch
        def main():
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            if resume:
                ckpt = torch.load("ckpt.pt")
                model.load_state_dict(ckpt["model"])
                opt.load_state_dict(ckpt["opt"])
            for epoch in range(2):
                # checkpoint every epoch
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, "ckpt.pt")
                torch.save(model, "whole.pt")

            torch.save(model.state_dict(), "final.pt")
            model.load_state_dict(torch.load("final.pt"))
            return model
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        def main():
            accelerator = Accelerator(cpu=True)
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt = accelerator.prepare(model, opt)
            if resume:
                ckpt = torch.load("ckpt.pt", map_location="cpu")
                accelerator.unwrap_model(model).load_state_dict(ckpt["model"])
                opt.load_state_dict(ckpt["opt"])
            for epoch in range(2):
                # checkpoint every epoch
                accelerator.wait_for_everyone()
                accelerator.save({"model": accelerator.unwrap_model(model).state_dict(), "opt": opt.state_dict(), "epoch": epoch}, "ckpt.pt")
                accelerator.save(accelerator.unwrap_model(model), "whole.pt")

            accelerator.wait_for_everyone()
            accelerator.save(accelerator.unwrap_model(model).state_dict(), "final.pt")
            accelerator.wait_for_everyone()
            accelerator.unwrap_model(model).load_state_dict(torch.load("final.pt", map_location="cpu"))
            accelerator.end_training()
            return model
        """,
    )


@pytest.mark.parametrize(
    "code",
    [
        # an explicit map_location is kept
        HEAD + "model.load_state_dict(torch.load('w.pt', map_location='cuda:0'))\n",
    ],
)
def test_load_near_misses(code: str) -> None:
    out = converted(code)
    assert "torch.load('w.pt'" in out and 'map_location="cpu"' not in out


def test_end_training_goes_before_the_main_guard_of_a_module_script() -> None:
    out = converted(HEAD + "\nif __name__ == '__main__':\n    print('done')\n")
    assert out.endswith(PREPARED + "accelerator.end_training()\n\nif __name__ == '__main__':\n    accelerator.print('done')\n")


def test_end_training_ends_the_method_that_drives_a_trainer() -> None:
    out = converted(
        """
        import torch
        class T:
            def __init__(self):
                self.model = torch.nn.Linear(2, 1)
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
            def step(self, x):
                self.model(x).sum().backward()
            def fit(self, data):
                for x in data:
                    self.step(x)
                return self
        """
    )
    assert "            self.step(x)\n        self.accelerator.end_training()\n        return self\n" in out


def test_saving_a_dict_of_metrics_goes_through_the_accelerator_without_unwrapping() -> None:
    out = converted(HEAD + "metrics = {'loss': 1.0}\ntorch.save(metrics, 'metrics.pt')\n")
    assert "\naccelerator.wait_for_everyone()\naccelerator.save(metrics, 'metrics.pt')\n" in out
    assert "unwrap_model(metrics)" not in out


def test_a_resume_load_before_any_save_gets_no_barrier() -> None:
    out = converted(HEAD + "model.load_state_dict(torch.load('w.pt'))\ntorch.save(model.state_dict(), 'w.pt')\n")
    assert "accelerator.wait_for_everyone()\naccelerator.unwrap_model(model).load_state_dict" not in out


def test_loading_the_file_just_saved_waits_for_the_main_process() -> None:
    out = converted(HEAD + "torch.save(model.state_dict(), 'w.pt')\nmodel.load_state_dict(torch.load('w.pt'))\n")
    assert (
        "\naccelerator.save(accelerator.unwrap_model(model).state_dict(), 'w.pt')\naccelerator.wait_for_everyone()\n"
        "accelerator.unwrap_model(model).load_state_dict(torch.load('w.pt', map_location=\"cpu\"))\n"
    ) in out
    # two saves in a row share one barrier, before both: the load still needs its own
    other = converted(
        HEAD + "torch.save(model.state_dict(), 'w.pt')\ntorch.save(opt.state_dict(), 'o.pt')\n"
        "model.load_state_dict(torch.load('w.pt'))\n"
    )
    assert other.count("accelerator.wait_for_everyone()") == 2
    # a save with its own barrier after the one that wrote the file already waited for it
    # (corpus/checkpoint: the best weights, then the epoch checkpoint, then loading the best)
    waited = converted(
        HEAD + "torch.save(model.state_dict(), 'w.pt')\nx = 1\ntorch.save(opt.state_dict(), 'o.pt')\n"
        "model.load_state_dict(torch.load('w.pt'))\n"
    )
    assert waited.count("accelerator.wait_for_everyone()") == 2


def test_a_load_before_prepare_reads_onto_the_cpu() -> None:
    """Every process reads the file: as saved, all would put its tensors on the GPU that wrote it."""
    out = converted(
        "import torch\nmodel = torch.nn.Linear(2, 1)\nmodel.load_state_dict(torch.load('w.pt'))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    assert "model.load_state_dict(torch.load('w.pt', map_location=\"cpu\"))" in out


def test_a_checkpoint_dict_bound_in_each_branch_is_unwrapped_once_in_each() -> None:
    """pytorch-cifar's shape: ``state = {...}`` then ``torch.save(state, ...)`` in both branches of an if/else."""
    out = converted(
        """
        import torch
        net = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for x in torch.ones(4, 2):
            net(x).sum().backward()
            optimizer.step()
        if x.sum() > 100:
            state = {"net": net.state_dict()}
            torch.save(state, "alt.pth")
        else:
            state = {"net": net.state_dict()}
            torch.save(state, "ckpt.pth")
        """
    )
    assert out.count('state = {"net": accelerator.unwrap_model(net).state_dict()}') == 2, out
    assert "unwrap_model(accelerator.unwrap_model" not in out


def test_a_prepared_models_state_dict_is_read_from_the_unwrapped_model() -> None:
    """DQN's target network copy: on 2 processes the DDP wrapper's keys carry ``module.`` and the plain
    target network refused them."""
    out = converted(
        """
        import copy
        import torch
        policy_net = torch.nn.Linear(2, 1)
        target_net = copy.deepcopy(policy_net)
        optimizer = torch.optim.SGD(policy_net.parameters(), lr=0.1)
        for x in torch.ones(4, 2):
            (policy_net(x) - target_net(x).detach()).pow(2).sum().backward()
            optimizer.step()
            target_net.load_state_dict(policy_net.state_dict())
            best = copy.deepcopy(policy_net.state_dict())
        """
    )
    assert "target_net.load_state_dict(accelerator.unwrap_model(policy_net).state_dict())" in out
    assert "best = copy.deepcopy(accelerator.unwrap_model(policy_net).state_dict())" in out


TRAIN = "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    opt.step()\n"


def test_a_function_handed_the_path_just_saved_waits_for_the_file() -> None:
    """cleanrl's ``torch.save(q_network.state_dict(), model_path)`` then ``evaluate(model_path, ...)``: only the
    main process writes the file, so the others wait before the function that reads it."""
    out = converted(
        HEAD + TRAIN + "if save_model:\n    model_path = 'runs/q.pt'\n    torch.save(model.state_dict(), model_path)\n"
        "    print(f'saved {model_path}')\n    returns = evaluate(model_path, make_env)\n"
    )
    assert ("    accelerator.print(f'saved {model_path}')\n    accelerator.wait_for_everyone()\n"
            "    returns = evaluate(model_path, make_env)\n") in out


@pytest.mark.parametrize(
    "after",
    [
        "if accelerator_free_flag:\n        evaluate(model_path)\n",  # in a branch some processes could skip
        "report(str(model_path))\n",  # handed a text, not the path
    ],
)
def test_no_barrier_where_a_process_could_skip_it_or_nothing_reads_the_file(after: str) -> None:
    out = converted(HEAD + TRAIN + "model_path = 'q.pt'\ntorch.save(model.state_dict(), model_path)\n"
                    + after.replace("        ", "    "))
    assert out.count("wait_for_everyone()") == 1  # the save's own


def test_a_load_from_a_file_opened_by_a_with_waits_before_the_with() -> None:
    """word_language_model's ``with open(args.save, 'rb') as f: model = torch.load(f)`` (under a second ``with``):
    a barrier inside the ``with`` comes after the other processes opened the file the main process had not
    written yet (FileNotFoundError on 2 processes), so it goes before the ``with open``."""
    whole = converted(
        HEAD + TRAIN + "with open(path, 'wb') as f:\n    torch.save(model, f)\n"
        "with open(path, 'rb') as f:\n    with torch.serialization.safe_globals([torch.nn.Linear]):\n"
        "        model = torch.load(f)\n"
    )
    assert ("accelerator.wait_for_everyone()\nwith open(path, 'rb') as f:\n"
            "    with torch.serialization.safe_globals([torch.nn.Linear]):\n"
            "        model = torch.load(f, map_location=\"cpu\").to(accelerator.device)\n") in whole
    assert whole.count("accelerator.wait_for_everyone()") == 2
    # a state dict read through the handle of the file just saved: the handle stands for its path
    weights = converted(
        HEAD + TRAIN + "torch.save(model.state_dict(), 'w.pt')\n"
        "with open('w.pt', 'rb') as f:\n    model.load_state_dict(torch.load(f))\n"
    )
    assert ("accelerator.wait_for_everyone()\nwith open('w.pt', 'rb') as f:\n"
            "    accelerator.unwrap_model(model).load_state_dict(torch.load(f, map_location=\"cpu\"))\n") in weights
    # a different file opened: nothing to wait for (the save's own barrier only)
    other = converted(
        HEAD + TRAIN + "torch.save(model.state_dict(), 'w.pt')\n"
        "with open('o.pt', 'rb') as f:\n    model.load_state_dict(torch.load(f))\n"
    )
    assert other.count("accelerator.wait_for_everyone()") == 1
    # the plain load by path is unchanged: the barrier right before its own statement
    plain = converted(HEAD + TRAIN + "torch.save(model, path)\nmodel = torch.load(path)\n")
    assert ("\naccelerator.wait_for_everyone()\n"
            "model = torch.load(path, map_location=\"cpu\").to(accelerator.device)\n") in plain


@pytest.mark.parametrize("extra", ["", ", weights_only=True"])
def test_a_helper_handed_the_prepared_model_saves_it_unwrapped_and_the_load_waits_for_it(extra: str) -> None:
    """Bjarten/early-stopping-pytorch (set I, W10): `early_stopping(val_loss, model)` runs the instance's `__call__`,
    whose `save_checkpoint(val_loss, model)` saved the prepared model's state dict (`module.` keys: the load after
    training crashed), and nothing kept the other processes from reading the file before the main process wrote it."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    helper = ModuleText("early_stopping", "early_stopping.py", (
        "import torch\n\n\nclass EarlyStopping:\n    def __init__(self, path='checkpoint.pt'):\n        self.best = None\n"
        "        self.path = path\n\n    def __call__(self, val_loss, model):\n"
        "        if self.best is None or val_loss < self.best:\n            self.best = val_loss\n"
        "            self.save_checkpoint(val_loss, model)\n\n    def save_checkpoint(self, val_loss, model):\n"
        "        torch.save(model.state_dict(), self.path)\n"))
    result = convert_source(
        "import torch\nfrom early_stopping import EarlyStopping\n\n\ndef train(model, opt, epochs):\n"
        "    early_stopping = EarlyStopping()\n    for epoch in range(epochs):\n        loss = model(torch.ones(2)).sum()\n"
        "        loss.backward()\n        opt.step()\n        early_stopping(float(epoch), model)\n"
        f"    model.load_state_dict(torch.load('checkpoint.pt'{extra}))\n\n\n"
        "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\ntrain(model, opt, 2)\n",
        modules=[helper])
    assert ("        early_stopping(float(epoch), model)\n    accelerator.wait_for_everyone()\n"
            f"    accelerator.unwrap_model(model).load_state_dict(torch.load('checkpoint.pt'{extra}, map_location=\"cpu\"))\n"
            ) in result.new, result.new
    text = next(c.new for c in result.companions if c.path == "early_stopping.py")
    assert "        self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), self.path)\n" in text, text


def test_a_copy_of_the_saved_checkpoint_is_made_once_and_read_after_a_barrier() -> None:
    """``torch.save(state, last)`` then ``shutil.copyfile(last, best)`` (the knowledge-distillation template's
    ``save_checkpoint``): the copy ran on every process, racing the main process's save (FileNotFoundError on the
    others in 1 of 3 launches) and writing ``best`` N times; a read of ``best`` later needs the barrier a save's
    read gets."""
    source = (
        "import shutil\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n"
        "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n    for x, y in loader:\n        optimizer.zero_grad()\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n"
        "    torch.save(model.state_dict(), 'last.pt')\n    shutil.copyfile('last.pt', 'best.pt')\n"
        "model.load_state_dict(torch.load('best.pt'))\n"
    )
    new = converted(source)
    assert "    if accelerator.is_main_process:\n        shutil.copyfile('last.pt', 'best.pt')\n" \
           "accelerator.wait_for_everyone()\naccelerator.unwrap_model(model).load_state_dict(" in new, new
