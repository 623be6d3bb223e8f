"""Set P's shapes (twelfth stop; their folders are named in docs/FIELD_TESTS.md), each a class a new author's program showed."""

from __future__ import annotations

import pytest
from _convert import codes, converted

from accelify.pipeline import convert_source
from accelify.program import ModuleText

DROPOUT_EARLY_STOP = """import torch
import torch.nn as nn


def training_loop(model, x, y, train_ind, val_ind, epochs, patience):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    best, bad, stopped = float("inf"), 0, False
    for epoch in range(epochs):
        optimizer.zero_grad()
        model.train()
        y_pred = model(x)
        loss = criterion(y_pred[train_ind], y[train_ind])
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            val_loss = criterion(y_pred[val_ind], y[val_ind])
            if val_loss < best:
                best, bad = val_loss, 0
            else:
                bad += 1
                if bad == patience:
                    stopped = True
        print(f"epoch {epoch} loss {loss.item():.3f} val {val_loss.item():.3f}")
        if stopped:
            break
    print("stopped at", epoch)


if __name__ == "__main__":
    x = torch.arange(2000 * 16, dtype=torch.float32).reshape(2000, 16).sin()
    y = (x.sum(1) > 0).long()
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 2))
    training_loop(model, x, y, list(range(100)), list(range(100, 400)), 400, 3)
"""


def test_an_early_stop_on_the_loss_of_a_dropout_forward_over_the_whole_data_stops_every_process_together() -> None:
    """P5 (a GCN trained on the whole graph, no DataLoader): the validation loss comes from the training forward,
    dropout on, so each process's differs; ``stopped = True`` under ``if bad == patience:`` stopped one process, and
    the other waited in its next backward (a hang, no warning). A forward of a model that draws (dropout) is local,
    and so is a flag set under a local test: the ``break`` becomes ``set_trigger``/``check_trigger``."""
    new = converted(DROPOUT_EARLY_STOP)
    assert "            accelerator.set_trigger()\n        if accelerator.check_trigger():\n            break\n" in new, new


def test_the_same_early_stop_of_a_model_that_does_not_draw_is_left() -> None:
    """Near miss: without dropout every process computes the same loss on the same data: nothing to stop together."""
    new = converted(DROPOUT_EARLY_STOP.replace("nn.Dropout(0.5), ", ""))
    assert "check_trigger" not in new
    assert "        if stopped:\n            break\n" in new


LOOPS = """import torch
import torch.nn as nn


def training_loop(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


def multiple_runs(model, loader, runs, training_loop):
    for i in range(runs):
        print("Run:", i + 1)
        training_loop(model, loader, 1)
"""

BRANCHES = """import sys
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from loops import training_loop, multiple_runs

if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    if len(sys.argv) < 2:
        print("Started training with 1 run.")
        training_loop(model, loader, 2)
    else:
        print("Started training with 2 runs.")
        multiple_runs(model, loader, 2, training_loop)
"""


def test_the_other_branch_of_the_if_that_makes_the_accelerator_does_not_use_it() -> None:
    """P5's ``main.py``: the accelerator made in the ``if`` branch that trains, the ``else`` branch's ``print`` went
    through it (a NameError on that path); and the training function, handed to ``multiple_runs`` as a value, is
    called there without the new parameter: reported (ACC061) with the fix."""
    result = convert_source(BRANCHES, modules=[ModuleText("loops", "loops.py", LOOPS)])
    assert '    else:\n        print("Started training with 2 runs.")\n' in result.new, result.new
    assert [w.code for w in result.warnings] == ["ACC061"]
    assert "functools.partial(training_loop, accelerator=accelerator)" in result.warnings[0].fix


def test_a_function_only_called_by_its_name_is_not_reported() -> None:
    """Near miss: without the value handed on, nothing to report."""
    source = BRANCHES.replace("        multiple_runs(model, loader, 2, training_loop)\n", "        training_loop(model, loader, 1)\n")
    result = convert_source(source, modules=[ModuleText("loops", "loops.py", LOOPS)])
    assert [w.code for w in result.warnings] == []


HOGWILD = """import torch
import torch.multiprocessing as mp
import torch.nn as nn


def train(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(10):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    model = nn.Linear(4, 1)
    model.share_memory()
    workers = [mp.Process(target=train, args=(model,)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
"""


def test_hogwild_training_is_refused_for_what_it_is() -> None:
    """P3 (an A3C: workers the script starts share one model's memory and step it in turn) was refused for a false
    reason (ACC017 on the ``break`` that ends an episode). Hogwild has no data-parallel counterpart: ACC003, naming
    ``share_memory`` and the workers."""
    found = codes(HOGWILD)
    assert found and all(c.startswith("ACC003") for c in found), found
    assert len(found) == 2  # ``model.share_memory`` and ``mp.Process``


VISUALIZER = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_loader = DataLoader(data, batch_size=8, shuffle=True)
    visualizer_loader = DataLoader(data, batch_size=5, shuffle=True)
    visualizer = iter(visualizer_loader)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        loss = train(model, train_loader, optimizer)
        with torch.no_grad():
            samples, _ = next(visualizer)
            recon = model(samples)
        print(f"epoch {epoch} loss {loss:.4f} sample mean {recon.mean().item():.4f}")


if __name__ == "__main__":
    main()
"""


def test_batches_drawn_for_a_look_under_no_grad_do_not_refuse_the_file() -> None:
    """P10 (a VAE showing a few reconstructions per epoch from ``next(visualizer)`` under ``no_grad``, the iterator
    made before ``prepare``) was refused with ACC020 ('every process would train on all of its data'): no backward
    sees those batches. The training converts; the iterator is left as it is."""
    new = converted(VISUALIZER)
    assert "        loss = train(model, train_loader, optimizer, accelerator)\n" in new
    assert "    visualizer = iter(visualizer_loader)\n" in new
    assert codes(VISUALIZER) == []


def test_batches_drawn_before_prepare_for_training_still_refuse() -> None:
    """Near miss: the same iterator's batches trained on (no ``no_grad``) are still ACC020."""
    source = VISUALIZER.replace("        with torch.no_grad():\n            samples, _ = next(visualizer)\n            recon = model(samples)\n",
                                "        samples, _ = next(visualizer)\n        recon = model(samples)\n        recon.mean().backward()\n")
    assert any(c.startswith("ACC020") for c in codes(source))


EPISODES = """import torch
import torch.nn as nn

torch.manual_seed(0)
sample_data = []
for _ in range(10):
    episode_data = []
    for _ in range(20):
        episode_data.append((torch.randn(4), torch.randn(1)))
    sample_data.append(episode_data)

net = nn.Linear(4, 1)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
for episode_data in sample_data:
    total = 0.0
    for x, y in episode_data:
        loss = nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    print(f"episode loss {total:.3f}")
"""


@pytest.mark.parametrize("source", [
    EPISODES,
    EPISODES.replace("sample_data = []\nfor _ in range(10):\n    episode_data = []\n    for _ in range(20):\n"
                     "        episode_data.append((torch.randn(4), torch.randn(1)))\n    sample_data.append(episode_data)\n",
                     "sample_data = [[(torch.randn(4), torch.randn(1)) for _ in range(20)] for _ in range(10)]\n"),
])
def test_a_list_the_script_fills_is_its_own_data(source: str) -> None:
    """P11 (a DQN trained over episodes kept in a list built right above): ACC021 'could not be followed to where it
    is built' (refused) for the list and for each episode. A list the script fills, and an item of it, are data it
    makes: converted, with ACC022 (every process walks all of it)."""
    assert [c.split(":")[0] for c in codes(source)] == ["ACC022"]


EXECUTED = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1, 1)

    def forward(self, t):
        return self.fc(t)


t = torch.linspace(0, 1, 50).unsqueeze(1)
if __name__ == "__main__":
    print("1. direct problem")
    exec(open("pkg/direct.py").read())
    print("2. inverse problem")
    exec(compile(open("pkg/inverse.py").read(), "pkg/inverse.py", "exec"))
"""


def test_training_run_from_a_file_through_exec_is_reported() -> None:
    """P9 (a PINN whose experiments are files the main script runs with ``exec(open(path).read())``): 'unchanged', 0
    warnings, and launched on 2 processes it trained two copies. The code exec reads is out of the conversion's
    sight: reported at each call (ACC062)."""
    result = convert_source(EXECUTED)
    assert [(w.code, w.line) for w in result.warnings] == [("ACC062", 17), ("ACC062", 19)]
    assert result.status == "unchanged"



TOKEN_COUNTS = """import torch
from torch.utils.data import DataLoader, TensorDataset


def run_epoch(model, data_loader, optimiser=None):
    total_loss = 0.0
    tok_correct = tok_total = 0
    for x, y in data_loader:
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        if optimiser is not None:
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        total_loss += loss.item()
        preds = out.argmax(-1)
        valmask = y >= 0
        tok_correct += ((preds == y) & valmask).sum().item()
        tok_total += valmask.sum().item()
    return tok_correct / max(1, tok_total), total_loss / len(data_loader)


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=8)
    dev = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=8)
    for ep in range(2):
        tr_acc, tr_loss = run_epoch(model, train, opt)
        with torch.no_grad():
            dev_acc, dev_loss = run_epoch(model, dev)
        print(ep, tr_acc, dev_acc, tr_loss, dev_loss)


if __name__ == "__main__":
    main()
"""


def test_counts_divided_by_a_guarded_count_are_reduced() -> None:
    """P2 (a seq2seq's ``run_epoch`` for training and evaluation: ``tok_correct / max(1, tok_total)``): the counts were
    left per process (ACC028 x2, the dev accuracy picking the best checkpoint and the early stop being process 0's).
    ``max(1, n)`` keeps a count from zero: the same count, so both sums are reduced (checked on 2 processes: the
    same accuracies as on one)."""
    new = converted(TOKEN_COUNTS)
    assert "    tok_correct = type(tok_correct)(accelerator.reduce(" in new
    assert "    tok_total = type(tok_total)(accelerator.reduce(" in new
    assert codes(TOKEN_COUNTS) == []


MODEL_KEEPS_LOSS = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 2)
        self.dec = nn.Linear(2, 4)

    def forward(self, x):
        recon = self.dec(self.enc(x))
        self.loss = ((recon - x) ** 2).sum()
        return recon


def train(model, loader, optimizer):
    model.train()
    for (x,) in loader:
        optimizer.zero_grad()
        model(x)
        model.loss.backward()
        optimizer.step()


def test(model, test_loader):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for (x,) in test_loader:
            model(x)
            test_loss += ((1 / len(test_loader.dataset)) * model.loss).item()
    print("Test set: Average loss: {:.4f}".format(test_loss))


def main():
    torch.manual_seed(0)
    model = VAE().to("cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
    test_loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)
    for epoch in range(2):
        train(model, train_loader, optimizer)
        test(model, test_loader)


if __name__ == "__main__":
    main()
"""


def test_a_loss_the_model_keeps_on_itself_is_this_processs_and_reduced() -> None:
    """P10 (a VAE whose forward keeps ``self.loss``; the test loop runs ``model(data)`` for it and sums
    ``model.loss``): the sum was taken for the same on every process (an attribute of a prepared model, as its
    parameters are) and printed as 1/N of the test loss; and ``model(data)``, its result unused, was 'gathered' into a
    name nothing reads. An attribute the model's own methods set is this process's value: the sum is reduced, and
    a forward whose result is thrown away gathers nothing."""
    new = converted(MODEL_KEEPS_LOSS)
    assert "gather" not in new
    assert "        test_loss = type(test_loss)(accelerator.reduce(" in new, new
    assert codes(MODEL_KEEPS_LOSS) == []


DRAWN_EPISODES = """import random

import numpy as np
import torch
import torch.nn as nn

sample_data = []
for _ in range(10):
    episode_data = []
    for _ in range(50):
        state, next_state = np.random.rand(4), np.random.rand(4)
        done = random.random() < 0.1
        episode_data.append((state, random.randint(0, 1), random.uniform(0, 1), next_state, done))
        if done:
            break
    sample_data.append(episode_data)

q_net = nn.Linear(4, 2)
optimizer = torch.optim.Adam(q_net.parameters(), lr=1e-3)
replay_buffer = []
for episode_data in sample_data:
    for transition in episode_data:
        replay_buffer.append(transition)
        if len(replay_buffer) >= 8:
            batch = random.sample(replay_buffer, 8)
            states = torch.tensor(np.array([b[0] for b in batch]), dtype=torch.float32)
            loss = q_net(states).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    print("episode done")
"""


def test_random_episodes_the_training_walks_are_drawn_alike_on_every_process() -> None:
    """P11 (a DQN over episodes drawn at random before training, each ending on a random ``done``, then replay
    batches sampled as it trains): the draws were left unseeded (ACC032: 'the training loop also draws its data as it
    goes'), so each process held episodes of other lengths, took another number of steps, and the run hung. The
    data set the loop walks is drawn alike (seeded), and each process gets its own stream after it for the replay
    samples."""
    new = converted(DRAWN_EPISODES)
    assert "np.random.seed(0)\nrandom.seed(0)\n" in new, new
    assert "if accelerator.process_index > 0:\n" in new
    assert not any(c.startswith("ACC032") for c in codes(DRAWN_EPISODES))
