"""Shapes found wrong in field-test set G (docs/FIELD_TESTS.md), not fixed yet: each is the minimal program of its
class and the behaviour a right conversion must have. They are strict expected failures: when a fix lands, the test
passes, pytest reports XPASS as a failure, and the mark is removed with the fix. Each names the rule's area that
owns the fix. Those fixed since are plain tests that say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from _convert import dedent
from accelify.pipeline import convert_path, convert_source

LOADER = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16, 1)).float())
loader = DataLoader(data, batch_size=4)
net = torch.nn.Linear(8, 1)
optimizer = torch.optim.Adam(net.parameters())
"""


def _new_and_codes(code: str) -> tuple[str, list[str]]:
    result = convert_source(dedent(code))
    assert result.status != "failed", result.error
    return result.new, [w.code for w in result.warnings]


def test_a_count_of_correct_samples_divided_inside_the_loop_is_reduced_or_reported() -> None:
    """marcinl/titanic-dnn: `Epoch 3 Accuracy` 27.2 on 2 processes against 59.1 on one. Fixed (averages): the count
    is summed across processes after the batch loop and the accuracy computed again from it, before it is printed;
    computed under a condition or from a value of the last batch instead, it cannot be recomputed there and is
    reported."""
    new, found = _new_and_codes(LOADER + dedent("""
        for epoch in range(2):
            correct = 0
            for x, y in loader:
                optimizer.zero_grad()
                out = net(x)
                torch.nn.functional.mse_loss(out, y).backward()
                optimizer.step()
                for idx, p in enumerate(out):
                    if torch.round(p) == y[idx]:
                        correct += 1
                acc = correct / len(data)
            print(acc)
        """))
    assert ("        acc = correct / len(data)\n"
            "    correct = accelerator.reduce(torch.tensor(correct, device=accelerator.device), \"sum\").item()\n"
            "    acc = correct / len(data)\n"
            "    accelerator.print(acc)\n") in new, new
    assert "ACC028" not in found
    _, found = _new_and_codes(LOADER + dedent("""
        correct = 0
        for i, (x, y) in enumerate(loader):
            out = net(x)
            for idx, p in enumerate(out):
                if torch.round(p) == y[idx]:
                    correct += 1
            if i == len(loader) - 1:
                acc = correct / len(data)
        print(acc)
        """))
    assert "ACC028" in found
    new, found = _new_and_codes(LOADER + dedent("""
        correct = 0
        for x, y in loader:
            for idx, p in enumerate(net(x)):
                if torch.round(p) == y[idx]:
                    correct += 1
            acc = correct / x.size(0)
        print(acc)
        """))
    assert "ACC028" in found and "accelerator.reduce" not in new  # the last batch's size: this process's own


def test_a_sum_read_in_the_for_else_clause_is_reduced() -> None:
    """udacity Part 5's first experiment: `tot_train_loss / len(trainloader.dataset)` in `for ... else:` prints
    1/N of the training loss (1.155 on 2 processes, 2.305 on one). Fixed (averages): reduced first in the clause;
    with a `break` that may skip the clause, reported."""
    new, _ = _new_and_codes(LOADER + dedent("""
        criterion = torch.nn.MSELoss(reduction="sum")
        for e in range(2):
            tot = 0
            for x, y in loader:
                optimizer.zero_grad()
                loss = criterion(net(x), y)
                tot += loss.item()
                loss.backward()
                optimizer.step()
            else:
                print(tot / len(loader.dataset))
        """))
    assert new.count("accelerator.reduce") == 1
    assert ("    else:\n"
            "        tot = accelerator.reduce(torch.tensor(tot, dtype=torch.float64, device=accelerator.device), \"sum\").item()\n"
            "        accelerator.print(tot / len(loader.dataset))\n") in new, new
    new, found = _new_and_codes(LOADER + dedent("""
        tot = 0.0
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(net(x), y)
            tot += loss.item()
            if loss.item() < 0.01:
                break
        else:
            print(tot / len(loader))
        """))
    assert "accelerator.reduce" not in new and "ACC028" in found


def test_removing_saved_checkpoints_is_left_to_the_main_process() -> None:
    """Diego999/pyGAT: each epoch saves `{epoch}.pkl`, then globs and removes the older ones: on 2 processes rank 1
    stopped with FileNotFoundError: '26.pkl'. Fixed (writes): the removal runs on the main process only, as the
    save; a file of each process's own (named with its rank) is still removed by each."""
    new, found = _new_and_codes("import glob\nimport os\n" + LOADER + dedent("""
        for epoch in range(3):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(net(x), y).backward()
                optimizer.step()
            torch.save(net.state_dict(), f"{epoch}.pkl")
            for file in glob.glob("*.pkl"):
                if int(file.split(".")[0]) < epoch:
                    os.remove(file)
        """))
    assert ("            if accelerator.is_main_process:\n"
            "                os.remove(file)\n") in new, new
    new, _ = _new_and_codes("import os\nimport shutil\nfrom pathlib import Path\n" + LOADER + dedent("""
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
        torch.save(net.state_dict(), "last.pt")
        Path("last.pt").unlink()
        shutil.rmtree("runs")
        os.remove(f"part{torch.distributed.get_rank()}.txt")
        """))
    assert ("if accelerator.is_main_process:\n    Path(\"last.pt\").unlink()\n"
            "    shutil.rmtree(\"runs\")\n") in new, new  # (neighbours share one guard)
    assert "\nos.remove(f\"part{torch.distributed.get_rank()}.txt\")\n" in new, new  # each process's own file


def test_a_results_file_written_by_a_helper_module_is_reported(tmp_path: Path) -> None:
    """jarfo/gcommands' `train.test(..., save=results)`: both processes open `train_testing.csv` and write their own
    shard's rows into it (18 of its 33 lines were left). The same helper in the script itself gets ACC024; fixed
    (writes): so does the module's, in the module's own result, and the per-process sums it returns for an early
    stop are reported (ACC028) there."""
    (tmp_path / "evaluation.py").write_text(dedent("""
        import torch


        def test(loader, model, save=None):
            if save is not None:
                csv = open(save, "wt")
                print("fname,label", file=csv)
            with torch.no_grad():
                for x, y in loader:
                    pred = model(x)
                    if save is not None:
                        for p in pred:
                            print(f"{float(p):.3f}", file=csv)
        """))
    (tmp_path / "main.py").write_text(LOADER + dedent("""
        from evaluation import test
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
        torch.save(net, "model.pt")
        model = torch.load("model.pt", weights_only=False)
        test(loader, model, save="results.csv")
        """))
    result = convert_path(tmp_path / "main.py")
    found = [(Path(w.path or "").name, w.code, w.line) for r in (result, *result.companions) for w in r.warnings]
    assert ("evaluation.py", "ACC024", 6) in found, found
    (tmp_path / "evaluation.py").write_text(dedent("""
        import json


        def test(loader, model, save):
            rows = [float(model(x).sum()) for x, _ in loader]
            with open(save, "w") as f:
                json.dump(rows, f)
        """))
    result = convert_path(tmp_path / "main.py")
    found = [(Path(w.path or "").name, w.code, w.line) for r in (result, *result.companions) for w in r.warnings]
    assert ("evaluation.py", "ACC024", 6) in found, found  # `with open(...)` in the helper, written by every process
    (tmp_path / "evaluation.py").write_text(dedent("""
        import torch


        def test(loader, model):
            test_loss, correct = 0.0, 0
            with torch.no_grad():
                for x, y in loader:
                    pred = model(x)
                    test_loss += torch.nn.functional.mse_loss(pred, y).item()
                    correct += ((pred > 0.5) == (y > 0.5)).sum().item()
            return test_loss / len(loader), correct
        """))
    (tmp_path / "main.py").write_text(LOADER + dedent("""
        from evaluation import test
        best, iteration = None, 0
        while iteration < 3:
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(net(x), y).backward()
                optimizer.step()
            torch.save(net, "model.pt")
            loss, correct = test(loader, torch.load("model.pt", weights_only=False))
            if best is None or loss < best:
                best, iteration = loss, 0
            else:
                iteration += 1
        """))
    result = convert_path(tmp_path / "main.py")
    found = [(Path(w.path or "").name, w.code, w.line) for r in (result, *result.companions) for w in r.warnings]
    assert {("evaluation.py", "ACC028", 9), ("evaluation.py", "ACC028", 10)} <= set(found), found


def test_an_experiment_that_never_moves_its_tensors_keeps_them_with_the_model() -> None:
    """mrdbourke's 01_pytorch_workflow: `model_0(X_train)` with `X_train` made on the CPU and never moved, while the
    notebook's second experiment sets `device = "cuda" if torch.cuda.is_available() else "cpu"`. Fixed (tensors):
    X is moved to the accelerator's device where it is made (every read of X and of y takes any device)."""
    new, found = _new_and_codes(dedent("""
        import torch
        X = torch.arange(0, 1, 0.02).unsqueeze(1)
        y = 0.7 * X + 0.3
        model_0 = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model_0.parameters(), lr=0.01)
        for epoch in range(10):
            loss = torch.nn.functional.l1_loss(model_0(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model_1 = torch.nn.Linear(1, 1).to(device)
        optimizer = torch.optim.SGD(model_1.parameters(), lr=0.01)
        X, y = X.to(device), y.to(device)
        for epoch in range(10):
            loss = torch.nn.functional.l1_loss(model_1(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """))
    first_forward = new.index("model_0(X")
    assert "X = torch.arange(0, 1, 0.02).unsqueeze(1).to(accelerator.device)" in new[:first_forward]
    assert "cpu=True" not in new and "ACC043" not in found


def test_a_cpu_tensor_a_plot_reads_is_named_not_moved() -> None:
    """The same experiment with the tensor also plotted (mrdbourke's `plot_predictions(train_data=X_train)`):
    moving X would hand matplotlib a GPU tensor, so X stays and ACC043 names it."""
    new, found = _new_and_codes(dedent("""
        import torch
        import matplotlib.pyplot as plt
        X = torch.arange(0, 1, 0.02).unsqueeze(1)
        y = 0.7 * X + 0.3
        plt.scatter(X, y)
        model_0 = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model_0.parameters(), lr=0.01)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for epoch in range(10):
            loss = torch.nn.functional.l1_loss(model_0(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """))
    assert "X = torch.arange(0, 1, 0.02).unsqueeze(1)\n" in new and "ACC043" in found


def test_split_full_batch_tensors_are_placed_or_named_by_what_reads_them() -> None:
    """mrdbourke's notebook shape: `X_train, X_test = X[:n], X[n:]` and a helper whose default argument is
    `X_test` (its `.numpy()` needs the CPU) keep X on the CPU and name it (ACC043); the loss target `y`, read
    only by torch, and a tensor made in the model's call are moved to the accelerator's device."""
    new, found = _new_and_codes(dedent("""
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        X = torch.randn(8, 2)
        y = torch.ones(8, 1)
        X_train, X_test = X[:6], X[6:]
        model = torch.nn.Linear(2, 1)
        loss_fn = torch.nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            loss = loss_fn(model(X_train), y[:6])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        def show(data=X_test):
            return data.numpy()
        print(model(torch.zeros(1, 2)))
        """))
    assert "X = torch.randn(8, 2)\n" in new and found.count("ACC043") == 1
    assert "y = torch.ones(8, 1, device=accelerator.device)" in new
    assert "model(torch.zeros(1, 2, device=accelerator.device))" in new


def test_a_cpu_tensor_a_data_set_also_holds_is_named_not_moved() -> None:
    """A full-batch evaluation `model(X)` of the tensor a loader's data set holds: moving X would make the
    loader hand out GPU tensors (its workers cannot), so X stays and ACC043 names it."""
    new, found = _new_and_codes(dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        device = "cuda" if torch.cuda.is_available() else "cpu"
        X = torch.randn(8, 2)
        loader = DataLoader(TensorDataset(X), batch_size=4)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
        print(model(X).sum())
        """))
    assert "X = torch.randn(8, 2)\n" in new and "ACC043" in found


def test_every_cpu_operand_of_a_model_input_is_moved() -> None:
    """`model(x * mask + noise)`: the loop's rows, the mask and the noise are each moved where they are made (the
    noise with `.to(...)`: drawn on the CPU, as the original's random stream)."""
    new, found = _new_and_codes(dedent("""
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        mask = torch.ones(2)
        noise = torch.randn(2)
        for x in torch.ones(4, 2):
            model(x * mask + noise).sum().backward()
            optimizer.step()
        """))
    assert "mask = torch.ones(2, device=accelerator.device)" in new
    assert "noise = torch.randn(2).to(accelerator.device)" in new
    assert "for x in torch.ones(4, 2, device=accelerator.device):" in new and "ACC043" not in found


def test_a_target_the_loss_combines_with_a_bound_output_is_moved() -> None:
    """`pred = model(X)` then `loss_fn(pred, y)`: y meets the model's output, so it is moved as X is."""
    new, found = _new_and_codes(dedent("""
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        X = torch.randn(8, 2)
        y = torch.ones(8, 1)
        model = torch.nn.Linear(2, 1)
        loss_fn = torch.nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            pred = model(X)
            loss = loss_fn(pred, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """))
    assert "X = torch.randn(8, 2).to(accelerator.device)" in new
    assert "y = torch.ones(8, 1, device=accelerator.device)" in new and "ACC043" not in found


def test_batches_from_a_wrapper_class_around_a_loader_are_reported() -> None:
    """karpathy/makemore (set B, converted at this stop): `InfiniteDataLoader` builds a DataLoader over a
    RandomSampler in `__init__`; the training calls `batch_loader.next()` in `while True:`. Every process seeds
    alike and draws the same batches (verify: 'data sharded' FAILED), and the conversion said nothing. Fixed (the
    seeds rule): ACC022 at the draw, the only test here that is no expected failure."""
    new, found = _new_and_codes(LOADER + dedent("""
        class InfiniteDataLoader:
            def __init__(self, dataset, **kwargs):
                sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=int(1e10))
                self.train_loader = DataLoader(dataset, sampler=sampler, **kwargs)
                self.data_iter = iter(self.train_loader)

            def next(self):
                return next(self.data_iter)


        torch.manual_seed(0)
        batch_loader = InfiniteDataLoader(data, batch_size=4)
        step = 0
        while True:
            x, y = batch_loader.next()
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            optimizer.step()
            step += 1
            if step == 10:
                break
        """))
    assert "ACC022" in found and "accelerator.prepare(net, optimizer" in new


@pytest.mark.parametrize("epochs", [1, 2], ids=["one-step-per-call", "ppo-update-loop"])
def test_a_method_the_script_calls_at_every_step_does_not_end_the_training(tmp_path: Path, epochs: int) -> None:
    """b8227112-tech/DQN-CartPole (set H): `Agent.learn(batch)` takes one optimizer step per call (or, as PPO's
    `update()`, a few in its own loop) and the script's episode loop calls it. `end_training()` was put at the end
    of `learn`: under Hugging Face Accelerate it destroys the process group, so the second step fails."""
    (tmp_path / "agent.py").write_text(dedent(f"""
        import torch


        class Agent:
            def __init__(self):
                self.online_net = torch.nn.Linear(4, 2)
                self.optimizer = torch.optim.Adam(self.online_net.parameters(), lr=1e-3)

            def learn(self, x, y):
                for _ in range({epochs}):
                    loss = torch.nn.functional.mse_loss(self.online_net(x), y)
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
                return loss.item()
        """))
    (tmp_path / "train.py").write_text(dedent("""
        import torch
        from agent import Agent

        agent = Agent()
        for episode in range(3):
            agent.learn(torch.randn(4, 4), torch.randn(4, 2))
        """))
    result = convert_path(tmp_path / "train.py")
    text = next(r.new for r in result.companions if Path(r.path).name == "agent.py")
    assert "self.accelerator.backward(loss)" in text, text
    assert "end_training" not in text, text


def test_a_prepared_models_state_dict_read_through_the_instance_holding_it_is_unwrapped(tmp_path: Path) -> None:
    """b8227112-tech/DQN-CartPole (set H): `Agent.__init__` builds and (converted) prepares `self.online_net`; the
    script copies it into the target network through the instance. The DDP wrapper's keys carry `module.`, so on 2
    processes `load_state_dict` failed; the accelerator is the instance's."""
    (tmp_path / "agent.py").write_text(dedent("""
        import torch


        class Agent:
            def __init__(self):
                self.online_net = torch.nn.Linear(4, 2)
                self.target_net = torch.nn.Linear(4, 2)
                self.optimizer = torch.optim.Adam(self.online_net.parameters(), lr=1e-3)

            def learn(self, x, y):
                loss = torch.nn.functional.mse_loss(self.online_net(x), self.target_net(x).detach() + y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        """))
    (tmp_path / "train.py").write_text(dedent("""
        import torch
        from agent import Agent

        agent = Agent()
        for episode in range(3):
            agent.learn(torch.randn(4, 4), torch.randn(4, 2))
            agent.target_net.load_state_dict(agent.online_net.state_dict())
            snapshot = agent.target_net.state_dict()
        """))
    result = convert_path(tmp_path / "train.py")
    assert "agent.target_net.load_state_dict(agent.accelerator.unwrap_model(agent.online_net).state_dict())" in result.new
    assert "snapshot = agent.target_net.state_dict()" in result.new  # never prepared: left as it is


def test_a_backward_in_an_episode_loop_each_process_leaves_alone_is_refused(tmp_path: Path) -> None:
    """b8227112-tech/DQN-CartPole (set H): the script steps its agent's prepared network once per environment step
    and breaks out of the step loop when its own environment terminates. Episodes end at different steps on each
    process, so the DDP backwards stop matching and the run crashed; the script has no accelerator to stop together
    with (the agent holds it): ACC017."""
    (tmp_path / "agent.py").write_text(dedent("""
        import torch


        class Agent:
            def __init__(self):
                self.online_net = torch.nn.Linear(4, 2)
                self.optimizer = torch.optim.Adam(self.online_net.parameters(), lr=1e-3)
        """))
    (tmp_path / "train.py").write_text(dedent("""
        import random
        import torch
        from agent import Agent

        agent = Agent()
        for episode in range(3):
            for step in range(100):
                terminated = random.random() < 0.1
                if terminated:
                    break
                loss = agent.online_net(torch.randn(4, 4)).pow(2).mean()
                agent.optimizer.zero_grad()
                loss.backward()
                agent.optimizer.step()
        """))
    result = convert_path(tmp_path / "train.py")
    assert result.status == "attention", result.status
    assert [(w.code, w.line) for w in result.warnings if w.code == "ACC017"] == [("ACC017", 10)], result.warnings
