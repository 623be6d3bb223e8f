"""Shapes found in field-test set M (docs/FIELD_TESTS.md): each the minimal program of its class, and what a right
conversion of it does."""

from __future__ import annotations

from _convert import codes, converted

from accelify.pipeline import convert_source
from accelify.program import ModuleText

TRAIN_FOR_TWO_MODELS = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, data, epochs=2):
    loader = DataLoader(data, batch_size=16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
small = train(torch.nn.Linear(4, 1), data)
big = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
big = train(big, data)
"""


def test_a_training_function_called_for_two_models_prepares_the_model_it_is_handed() -> None:
    """M3: a notebook's ``train(model, data)`` builds its own loader and optimizer and is called for a flow, then a
    RealNVP: only the optimizer and the loader were prepared, and each process trained its own copy."""
    new = converted(TRAIN_FOR_TWO_MODELS)
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in new
    assert codes(TRAIN_FOR_TWO_MODELS) == []


def test_an_evaluation_function_called_for_two_models_is_not_a_place_to_prepare_them() -> None:
    """The same call shape without an optimizer of the function's own: the models are prepared where they train."""
    code = TRAIN_FOR_TWO_MODELS.replace(
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", "").replace("            optimizer.step()\n", "")
    assert "accelerator.prepare(model" not in converted(code)


def _found(result) -> list[str]:  # noqa: ANN001
    return [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]


ENGINE_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import engine

train_ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
valid_ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
train_dl = DataLoader(train_ds, batch_size=16)
valid_dl = DataLoader(valid_ds, batch_size=16)
model = nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in train_dl:
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    valid_loss, valid_acc = engine.evaluate(valid_ds, valid_dl, model)
    print(f"epoch {epoch} valid_loss {valid_loss:.6f} accuracy {valid_acc:.6f}")
"""

ENGINE = """\
import torch
import torch.nn as nn


def evaluate(dataset, dataloader, model):
    model.eval()
    val_loss, val_acc = 0, 0
    num_batches = int(len(dataset) / dataloader.batch_size)
    for x, y in dataloader:
        with torch.no_grad():
            output = model(x)
            val_loss += nn.CrossEntropyLoss()(output, y)
            val_acc += (output.argmax(1) == y).float().mean().item()
    return val_loss / num_batches, val_acc / num_batches
"""


def test_batch_means_summed_over_a_gathered_loop_and_divided_by_the_data_sets_batch_count_are_per_original_batch() -> None:
    """M4: a Kaggle engine's ``Evaluate`` sums each batch's mean loss and accuracy under ``with torch.no_grad():`` and
    divides by ``int(len(dataset) / loader.batch_size)``: over the gathered loop each sum was 1/N, unwarned."""
    result = convert_source(ENGINE_SCRIPT, modules=[ModuleText("engine", "engine.py", ENGINE)])
    engine = result.companions[0].new
    b = "dataloader.batch_sampler.batch_size"
    assert f"            for output, y in zip(output.split({b}), y.split({b})):\n" \
        "                val_loss += nn.CrossEntropyLoss()(output, y)\n" \
        "                val_acc += (output.argmax(1) == y).float().mean().item()\n" in engine
    assert "    return val_loss / num_batches, val_acc / num_batches" in engine
    assert _found(result) == []


def test_batch_means_summed_over_a_gathered_loop_and_divided_by_what_cannot_be_placed_are_reported() -> None:
    """The same sums divided by a count this cannot place are one pass's means of N batches: reported (ACC042), never
    left silently."""
    engine = ENGINE.replace("int(len(dataset) / dataloader.batch_size)", "dataloader.batch_size + 1")
    assert engine != ENGINE
    result = convert_source(ENGINE_SCRIPT, modules=[ModuleText("engine", "engine.py", engine)])
    assert _found(result) == ["engine.py:ACC042", "engine.py:ACC042"]


AGENT = """\
import numpy as np
import torch
import torch.nn as nn


class Agent:
    def __init__(self):
        self.q_net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
        self.optim = torch.optim.Adam(self.q_net.parameters(), lr=1e-3)

    def update(self, states, targets):
        loss = torch.mean((self.q_net(states).max(1).values - targets) ** 2)
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
"""

EPISODES = """\
import numpy as np
import torch

from agent import Agent

agent = Agent()
for episode in range(4):
    steps = 0
    while True:
        agent.update(torch.randn(8, 4), torch.randn(8))
        steps += 1
        if np.random.uniform() < 0.1 or steps >= 50:
            break
    print(f"Episode {episode} | steps {steps}")
"""


def test_an_agent_updated_per_step_of_an_episode_each_process_ends_alone_is_refused() -> None:
    """M7 (DQN): the entry's ``while True:`` over an episode's steps calls the agent's update, and breaks when the
    process's own environment ends the episode: each process took its own number of steps, DDP paired unrelated
    steps and the run crashed at the end, with 0 warnings. Refused: ACC017 at the break (and at a ``while not done:``
    test)."""
    modules = [ModuleText("agent", "agent.py", AGENT)]
    result = convert_source(EPISODES, modules=modules)
    assert result.status == "attention" and [w.code for w in result.warnings] == ["ACC017"], _found(result)
    done = EPISODES.replace("    while True:\n", "    done = False\n    while not done:\n").replace(
        "        if np.random.uniform() < 0.1 or steps >= 50:\n            break\n",
        "        done = np.random.uniform() < 0.1\n")
    assert [w.code for w in convert_source(done, modules=modules).warnings] == ["ACC017"]
    counted = EPISODES.replace("np.random.uniform() < 0.1 or ", "")  # every process takes the same steps
    assert "ACC017" not in [w.code for w in convert_source(counted, modules=modules).warnings]


PRINTS_AROUND_MAIN = """\
import time
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    print("==> Train done.")


if __name__ == "__main__":
    print("VERSION 19-12-02")
    start = time.time()
    main()
    print("Total elapsed time: {0:.1f} sec".format(time.time() - start))
"""


def test_prints_around_the_call_that_trains_are_printed_once() -> None:
    """M8 (CycleGAN): the ``__main__`` block prints a banner before ``main(args)`` and the elapsed time after it,
    and the accelerator is made inside ``main``: each of those lines came once per process, unwarned."""
    new = converted(PRINTS_AROUND_MAIN)
    assert '    PartialState(cpu=True).print("VERSION 19-12-02")\n' in new
    assert '    PartialState(cpu=True).print("Total elapsed time: {0:.1f} sec".format(time.time() - start))\n' in new
    assert '    accelerator.print("==> Train done.")\n' in new
    assert "from accelify.runtime import Accelerator, PartialState\n" in new


def test_a_loop_over_the_bar_a_with_statement_binds_is_a_loop_over_its_iterable() -> None:
    """M3 (a normalizing-flow notebook): ``with tqdm.tqdm(range(epochs)) as tepoch: for epoch in tepoch:`` was a
    loop over something that "could not be followed" (a false ACC021 refused the notebook); so was ``with
    tqdm(loader) as bar: for x, y in bar:``. A progress bar enters as itself: the loops walk its iterable."""
    for header, loop in (("with tqdm.tqdm(range(epochs)) as tepoch:", "for epoch in tepoch:"),
                         ("with tqdm.tqdm(loader) as bar:", "for epoch in range(epochs):")):
        inner = "for x, y in bar:" if "bar" in header else "for x, y in loader:"
        code = (
            "import torch\nimport tqdm\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
            "def train(model, data, epochs=2):\n    loader = DataLoader(data, batch_size=16)\n"
            "    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)\n"
            f"    {header}\n        {loop}\n            {inner}\n"
            "                loss = torch.nn.functional.mse_loss(model(x), y)\n                optimizer.zero_grad()\n"
            "                loss.backward()\n                optimizer.step()\n    return model\n\n\n"
            "model = torch.nn.Linear(2, 1)\ntrain(model, TensorDataset(torch.randn(64, 2), torch.randn(64, 1)))\n")
        assert codes(code) == [], header
        assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in converted(code)


def test_a_module_level_device_used_only_after_the_accelerator_of_the_main_block_is_the_accelerators() -> None:
    """M6 (a matrix-factorisation script): ``device = "cuda:0" if ... else "cpu"`` at the top, classes, then the
    whole training under ``if __name__ == "__main__":``, where the accelerator is made: the device stayed ``cuda:0``
    (ACC011), and on a GPU machine every process would move its batches to the first GPU."""
    code = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "device = \"cuda:0\" if torch.cuda.is_available() else \"cpu\"\n\n\n"
        "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(2, 1)\n\n    def forward(self, x):\n        return self.fc(x)\n\n\n"
        "if __name__ == \"__main__\":\n    model = Net().to(device)\n    print(\"training on\", device)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n"
        "    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n        loss.backward()\n        optimizer.step()\n")
    new = converted(code)
    assert "    accelerator = Accelerator()\n    device = accelerator.device\n" in new, new
    assert codes(code) == []
    early = code.replace("\n\nclass Net", "\nprint(torch.zeros(1).to(device))\n\nclass Net")  # used before: left, reported
    assert "ACC011" in [c.split(":")[0] for c in codes(early)]


FIGURES_FROM_TOP = """\
import matplotlib.pyplot as plt
import torch
from torch.utils.data import DataLoader, TensorDataset


def plot_weights(w, i):
    plt.imshow(w)
    plt.savefig(f"images/{i:03}.png")


def train_model(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 2)), batch_size=4):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    dense = torch.nn.Linear(2, 2)
    train_model(dense)
    plot_weights(dense.weight.detach(), 0)
    sparse = torch.nn.Linear(2, 2)
    train_model(sparse)
    plot_weights(sparse.weight.detach(), 1)
"""


def test_a_figure_drawn_by_a_function_the_top_level_calls_is_written_once() -> None:
    """M9 (lottery-ticket pruning): ``plot_weight_matrix`` saves a figure per round and is called from the
    ``__main__`` block, while the accelerator is made in ``train_model``: every process wrote every image."""
    new = converted(FIGURES_FROM_TOP)
    assert '    if PartialState(cpu=True).is_main_process:\n        plt.savefig(f"images/{i:03}.png")\n' in new, new
    assert "from accelify.runtime import Accelerator, PartialState\n" in new
    assert codes(FIGURES_FROM_TOP) == []


def test_a_break_on_the_line_of_its_if_stops_every_process_together() -> None:
    """R3's re-run of M7: ``if loss.item() < 0.8: break`` on one line was never seen (the walk read only statement
    lines), so 2 processes hung; and ``if done: break`` in an episode's ``while True:`` was not refused."""
    code = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n"
        "for epoch in range(3):\n    for x, y in loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n        if loss.item() < 0.8: break\n")
    new = converted(code)
    assert "        if loss.item() < 0.8: accelerator.set_trigger()\n        if accelerator.check_trigger():\n" \
        "            break\n" in new, new
    one_line = EPISODES.replace("        if np.random.uniform() < 0.1 or steps >= 50:\n            break\n",
                                "        if np.random.uniform() < 0.1 or steps >= 50: break\n")
    assert one_line != EPISODES
    result = convert_source(one_line, modules=[ModuleText("agent", "agent.py", AGENT)])
    assert [w.code for w in result.warnings] == ["ACC017"], _found(result)


def test_batch_means_bound_to_names_and_summed_over_a_gathered_loop_are_never_left_silently() -> None:
    """R3's re-run of M4 (``engine.Evaluate`` as published): ``loss = criterion(output, y); val_loss += loss`` and
    ``accuracy = metrics.accuracy_score(pred, y); val_acc += accuracy`` were 1/N of the original's, unwarned; then
    reported (ACC042). Now their kinds are known (a mean loss made under ``no_grad`` is a tensor; scikit-learn's score
    is a float), and the pass's statements run per original batch as the unnamed sums' do."""
    named = ENGINE.replace(
        "            val_loss += nn.CrossEntropyLoss()(output, y)\n"
        "            val_acc += (output.argmax(1) == y).float().mean().item()\n",
        "            loss = nn.CrossEntropyLoss()(output, y)\n            val_loss += loss\n"
        "            accuracy = metrics.accuracy_score(output.argmax(1), y)\n            val_acc += accuracy\n")
    named = "from sklearn import metrics\n" + named
    result = convert_source(ENGINE_SCRIPT, modules=[ModuleText("engine", "engine.py", named)])
    engine = result.companions[0].new
    b = "dataloader.batch_sampler.batch_size"
    assert f"            for output, y in zip(output.split({b}), y.split({b})):\n" \
        "                loss = nn.CrossEntropyLoss()(output, y)\n                val_loss += loss\n" in engine, engine
    assert _found(result) == [], _found(result)


def test_a_training_function_called_per_fresh_model_in_a_loop_prepares_each_where_it_trains() -> None:
    """R3's re-run of M3: ``for name in data_types: model = Flow(); model = train(model, data)``, where ``train``
    builds its own loader and optimizer over the model it is handed, was refused with ACC007 ("create it once,
    before the loop"): advice that would make one model of the notebook's independent trainings."""
    code = TRAIN_FOR_TWO_MODELS.replace(
        "small = train(torch.nn.Linear(4, 1), data)\nbig = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), "
        "torch.nn.Linear(8, 1))\nbig = train(big, data)\n",
        "for name in (\"moons\", \"circles\"):\n    model = torch.nn.Linear(4, 1)\n    model = train(model, data)\n")
    assert code != TRAIN_FOR_TWO_MODELS
    assert codes(code) == []
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in converted(code)


def test_a_prepared_model_handed_to_an_ema_that_copies_its_state_dict_by_key_is_handed_unwrapped() -> None:
    """Set N8 (a Kaggle k-fold with timm-style ``ModelEMA``): ``ema = ModelEMA(model)`` before ``prepare``, then
    ``ema.update(model)`` copying ``model.state_dict()[k]`` into its copy's keys: the prepared model's keys are
    ``module.*``, nothing matched and the EMA never moved, with 0 warnings."""
    code = (
        "import copy\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
        "class ModelEMA:\n    def __init__(self, model, decay=0.9):\n        self.ema = copy.deepcopy(model)\n"
        "        self.decay = decay\n\n    @torch.no_grad()\n    def update(self, model):\n"
        "        msd = model.state_dict()\n        for k, v in self.ema.state_dict().items():\n"
        "            if k in msd:\n                v.copy_(self.decay * v + (1 - self.decay) * msd[k])\n\n\n"
        "model = torch.nn.Linear(4, 1)\nema = ModelEMA(model)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)\n"
        "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n    optimizer.zero_grad()\n"
        "    loss.backward()\n    optimizer.step()\n    ema.update(model)\n")
    assert "    ema.update(accelerator.unwrap_model(model))\n" in converted(code)
    assert codes(code) == []


def test_a_log_file_opened_around_the_training_is_not_kept_to_the_main_process_whole() -> None:
    """Set N14 (a U-Net's run log): ``with open("runs.txt", "a") as f:`` around the epochs was put whole under
    ``if accelerator.is_main_process:``: the main process trained alone and waited at its first backward forever.
    It was then reported (ACC024); since the fourteenth stop the other processes write to ``os.devnull`` and the
    block runs on every process (``test_field_set_u.py``)."""
    code = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)\n"
        "model = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.05)\n"
        "with open(\"runs.txt\", \"a\") as f:\n    f.write(\"lr 0.05\\n\")\n    for epoch in range(2):\n"
        "        for xb, yb in loader:\n            loss = torch.nn.functional.mse_loss(model(xb), yb)\n"
        "            optimizer.zero_grad()\n            loss.backward()\n            optimizer.step()\n"
        "        f.write(f\"epoch {epoch}\\n\")\n")
    new = converted(code)
    assert "if accelerator.is_main_process:" not in new, new
    assert 'with open("runs.txt", "a") if accelerator.is_main_process else open(os.devnull, "a") as f:\n' in new, new
    assert codes(code) == []


def test_a_mac_users_device_line_is_a_device_choice() -> None:
    """Set N6: ``device = torch.device("mps") if torch.backends.mps.is_available() else torch.device("cpu")`` was no
    device choice: ACC002 at each ``.to(device)``, and on a CUDA machine the batches went back to the CPU."""
    code = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "device = torch.device(\"mps\") if torch.backends.mps.is_available() else torch.device(\"cpu\")\n"
        "model = torch.nn.Linear(4, 1).to(device)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for xb, yb in DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), batch_size=4):\n"
        "    xb, yb = xb.to(device), yb.to(device)\n"
        "    torch.nn.functional.mse_loss(model(xb), yb).backward()\n    optimizer.step()\n")
    assert codes(code) == []
    assert "torch.backends.mps" not in converted(code)


def test_a_figure_saved_where_the_accelerator_is_made_needs_no_partial_state() -> None:
    """The replay of the earlier field programs (a VAE's ``main(args)`` saving its figures, called from the
    ``__main__`` block): the figure is the writes rule's, kept to the main process by the accelerator, and
    ``PartialState`` was imported for nothing."""
    code = FIGURES_FROM_TOP.replace("        optimizer.step()\n", "        optimizer.step()\n    plt.savefig(\"last.png\")\n")
    new = converted(code)
    assert "    if accelerator.is_main_process:\n        plt.savefig(\"last.png\")\n" in new, new
    assert new.count("PartialState") == 2  # the import and plot_weights' figure, none for train_model's
