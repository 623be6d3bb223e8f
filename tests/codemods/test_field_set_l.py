"""Shapes found in field-test set L (docs/FIELD_TESTS.md): each the minimal program of its class, and what a right
conversion of it does."""

from __future__ import annotations

from accelify.pipeline import convert_source
from accelify.program import ModuleText

FIT_SCRIPT = """\
import torch
from torch import nn
from torch.utils.data import TensorDataset
from train_utils import fit

torch.manual_seed(0)
train = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
fit(model, train, nn.MSELoss(), optimizer, nb_epoch=2)
"""

FIT_HELPERS = """\
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm_notebook


def _fit_epoch(model, loader, criterion, optimizer):
    model.train()
    total = 0.0
    t = tqdm_notebook(loader, total=len(loader))
    for data, target in t:
        loss = criterion(model(data), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(loader)


def fit(model, train, criterion, optimizer, batch_size=8, nb_epoch=1):
    train_loader = DataLoader(train, batch_size, shuffle=False)
    for epoch in tqdm_notebook(range(nb_epoch), total=nb_epoch):
        loss = _fit_epoch(model, train_loader, criterion, optimizer)
        print('[ loss: {:.4f} ]'.format(loss))
"""

GENERATOR = """\
import numpy as np
import torch
from torch import nn


class DataGenerator:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def train_generator(self, batch_size):
        for i in range(0, len(self.x), batch_size):
            yield self.x[i:i + batch_size], self.y[i:i + batch_size]


def main():
    torch.manual_seed(0)
    data = DataGenerator(np.random.RandomState(0).randn(64, 4).astype("float32"), np.arange(64) % 2)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(2):
        generator_train = data.train_generator(16)
        train_loss = []
        while True:
            try:
                x, y = generator_train.__next__()
            except StopIteration:
                break
            optimizer.zero_grad()
            loss = criterion(model(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            optimizer.step()
            train_loss.append(loss.item())
        print('epoch {:d} batches {:d} training loss {:.4f}'.format(epoch + 1, len(train_loss), np.mean(train_loss)))


if __name__ == '__main__':
    main()
"""

AGENT = """\
import numpy as np
import torch
from torch import nn
from utils import get_optimizer


class Agent:
    def __init__(self, lr=0.01):
        self.device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
        self.policy = nn.Linear(4, 2).to(self.device)
        self.optimizer = get_optimizer(learning_rate=lr, model_parameters=self.policy.parameters())

    def learn(self, iterations=3):
        for it in range(iterations):
            state = torch.from_numpy(np.random.randn(32, 4).astype('float32')).to(self.device)  # experience (an env): each process its own
            loss = self.policy(state).pow(2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        print('weight sum {:.6f}'.format(self.policy.weight.sum().item()))
"""

AGENT_MAIN = """\
import torch
from agent import Agent

if __name__ == '__main__':
    torch.manual_seed(0)
    agent = Agent()
    agent.learn()
"""

OPTIMIZER_HELPER = """\
import torch


def get_optimizer(learning_rate, model_parameters):
    return torch.optim.Adam(params=model_parameters, lr=learning_rate)
"""

CHECKPOINT = """\
import os
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(student, data_loader, optimizer, run_dir, device, epochs=2):
    student = student.to(device).train()
    for epoch in range(epochs):
        for x, y in data_loader:
            loss = nn.functional.mse_loss(student(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        save_info = {"state_dict": student.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        torch.save(save_info, os.path.join(run_dir, "last.pth"))


if __name__ == "__main__":
    torch.manual_seed(0)
    run_dir = "run"
    os.makedirs(run_dir, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    student = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    train(student, loader, optimizer, run_dir, device)
    student.load_state_dict(torch.load(os.path.join(run_dir, "last.pth"))["state_dict"])
    print("reloaded, weight sum {:.6f}".format(student.weight.sum().item()))
"""


TICKERS = """\
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm


def dataPreprocessing(tic):
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    return x, DataLoader(TensorDataset(x, y), batch_size=8)


def trainModel(tic):
    X_train, train_loader = dataPreprocessing(tic)
    model = nn.Linear(X_train.shape[1], 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for X_batch, y_batch in train_loader:
            loss = nn.functional.mse_loss(model(X_batch), y_batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    torch.save(model.state_dict(), 'model_' + tic + '.pth')


if __name__ == '__main__':
    data = pd.DataFrame({'tic': ['ARL', 'ARL', 'BH']})
    tic = data.tic.unique()
    for i in tqdm(tic):
        trainModel(i)
"""

MICRO_BATCHES = """\
import torch
from torch import nn
from mylib import build_loader

model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def step(batch):
    x, y = batch
    for xs, ys in zip(x.chunk(2), y.chunk(2)):
        nn.functional.mse_loss(model(xs), ys).backward()
    optimizer.step()


loader = build_loader()
for batch in loader:
    step(batch)
"""

CRITIC_STEPS = """\
import torch
from torch import nn
from mylib import build_loader

critic = nn.Linear(4, 1)
optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)


def train_critic(real):
    for _ in range(5):
        optimizer.zero_grad()
        critic(real).mean().backward()
        optimizer.step()


loader = build_loader()
for real in loader:
    train_critic(real)
"""

LOADERS_FROM_A_LIBRARY = """\
import torch
from torch import nn
from mylib import build_loaders


def train(loader):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


for loader in build_loaders():
    train(loader)
"""


LIGHTNING_MODULE = """\
import torch
import torch.nn as nn
import pytorch_lightning as pl


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.fc(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)
"""

LIGHTNING_TRAINER = """\
import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset
import model as m

loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
net = m.Net()
trainer = pl.Trainer(max_epochs=2, accelerator="gpu", devices=-1)
trainer.fit(net, loader)
torch.save(net.state_dict(), "best_model.pt")
"""


DATA_MODULE = """\
import torch
from torch.utils.data import TensorDataset


def get_file_names():
    print('Preparing file names. This might take a while ...')
    names = [f'clip{i}.wav' for i in range(32)]
    print('Training set [{}]'.format(len(names)))
    return names


def describe(data):
    print('samples:', len(data))


train_names = get_file_names()
train_data = TensorDataset(torch.randn(len(train_names), 4), torch.randint(0, 2, (len(train_names),)))
print('Number of samples:', len(train_data), file=open('samples.txt', 'w'))

if __name__ == '__main__':
    print('a self-test: never runs on import')
"""

DATA_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from data import train_data, describe

loader = DataLoader(train_data, batch_size=8, shuffle=False)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
describe(train_data)

if __name__ == "__main__":
    for epoch in range(2):
        for data, target in loader:
            optimizer.zero_grad()
            loss = criterion(model(data), target)
            loss.backward()
            optimizer.step()
        print('Epoch [{}] last loss [{:.4f}]'.format(epoch, loss.item()))
"""


def _found(result) -> list[str]:  # noqa: ANN001
    return [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]


def test_a_loader_walked_through_tqdm_notebook_is_the_loader() -> None:
    """L3 (fast neural style transfer, a notebook's ``fit`` helper): ``t = tqdm_notebook(loader, total=len(loader))``,
    the older notebook bar tqdm still exports, was no progress bar: a false ACC021 ("could not be followed") refused
    the program. It is one, as ``tqdm.notebook.tqdm`` is: the loader ``fit`` builds is prepared there."""
    result = convert_source(FIT_SCRIPT, modules=[ModuleText("train_utils", "train_utils.py", FIT_HELPERS)])
    assert result.status == "converted" and _found(result) == [], _found(result)
    helpers = result.companions[0].new
    assert "    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)\n" in helpers, helpers


def test_a_training_fed_by_a_batch_generator_of_the_programs_own_is_reported() -> None:
    """L4 (seq2seq translation): ``gen = data.train_generator(bs)`` then ``while True: x, y = gen.__next__()`` (or
    ``for x, y in gen``) inside an epoch loop: every process walked every batch, and nothing said so (the epoch loop
    over ``range`` was the only one looked at). ACC022 names the draw."""
    result = convert_source(GENERATOR)
    assert [w.code for w in result.warnings] == ["ACC022"], _found(result)
    walked = convert_source(GENERATOR.replace(
        "        while True:\n            try:\n                x, y = generator_train.__next__()\n"
        "            except StopIteration:\n                break\n", "        for x, y in generator_train:\n"))
    assert [w.code for w in walked.warnings] == ["ACC022"], _found(walked)
    shuffled = convert_source(GENERATOR.replace(
        "        for i in range(0, len(self.x), batch_size):\n",
        "        order = np.arange(len(self.x))\n        np.random.shuffle(order)\n"
        "        for i in range(0, len(self.x), batch_size):\n"))  # (a generator that draws as the training runs)
    assert [w.code for w in shuffled.warnings] == ["ACC022"], _found(shuffled)


def test_a_model_whose_optimizer_a_helper_builds_over_its_parameters_is_prepared() -> None:
    """L5 (PPO): ``self.optimizer = get_optimizer(learning_rate=lr, model_parameters=self.policy.parameters())`` with
    the helper returning ``torch.optim.Adam(params=model_parameters, ...)``: the optimizer was prepared and the model
    not (each process trained its own policy, silently). The owner of the parameters handed to the helper is what it
    trains: prepared with it."""
    result = convert_source(AGENT_MAIN, modules=[ModuleText("agent", "agent.py", AGENT),
                                                 ModuleText("utils", "utils.py", OPTIMIZER_HELPER)])
    agent = next(c.new for c in result.companions if c.path == "agent.py")
    assert "self.policy, self.optimizer = self.accelerator.prepare(" in agent.replace("\n            ", "").replace(
        "(\n", "("), agent


def test_a_model_rebound_through_its_own_mode_switch_is_still_the_prepared_one() -> None:
    """L6 (knowledge distillation): ``student = student.to(device).train()`` at the top of ``train(student, ...)``,
    then ``{"state_dict": student.state_dict(), ...}`` saved: ``.train()`` returns the module, but the name was taken
    for a new object, so the checkpoint held the wrapper's ``module.`` keys and the caller's reload failed. A mode
    switch (and a placement) hands back the same model: its state is unwrapped."""
    result = convert_source(CHECKPOINT)
    assert _found(result) == [], _found(result)
    assert '"state_dict": accelerator.unwrap_model(student).state_dict()' in result.new, result.new
    assert "    student = student.train()\n" in result.new, result.new


LOG_FIRST = """\
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(filename='train_log.txt', filemode='w', level=logging.INFO)
console = logging.StreamHandler()
logging.getLogger().addHandler(console)

loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
model = nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters())
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
logging.info(f'loss: {loss.item():.4f}')
"""


def test_the_accelerator_is_created_before_a_log_setup_kept_to_the_main_process() -> None:
    """L9 (SRGAN): ``logging.basicConfig(filename=...)`` as the script's first statement is kept to the main process,
    and the accelerator, created right before it, was written inside that guard: ``if accelerator.is_main_process:
    accelerator = Accelerator()`` (a NameError on every process). The accelerator comes first, outside the guard."""
    result = convert_source(LOG_FIRST)
    assert result.status == "converted" and _found(result) == [], _found(result)
    assert (
        "\naccelerator = Accelerator()\nif accelerator.is_main_process:\n"
        "    logging.basicConfig(filename='train_log.txt', filemode='w', level=logging.INFO)\n"
        "    console = logging.StreamHandler()\n"
    ) in result.new, result.new


PER_IMAGE = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchvision.transforms import ToPILImage

train_loader = DataLoader(TensorDataset(torch.rand(8, 3, 8, 8), torch.rand(8, 3, 8, 8)), batch_size=4)
val_loader = DataLoader(TensorDataset(torch.rand(4, 3, 8, 8), torch.rand(4, 3, 8, 8)), batch_size=1, shuffle=False)
generator = nn.Conv2d(3, 3, 3, padding=1)
optimizer = torch.optim.Adam(generator.parameters())
for lr, hr in train_loader:
    loss = nn.functional.mse_loss(generator(lr), hr)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
psnrs = []
for image_id, (lr, hr) in enumerate(val_loader):
    assert lr.shape[0] == 1
    with torch.no_grad():
        sr = torch.sigmoid(generator(lr))
    sr_img = ToPILImage()(sr.cpu().squeeze())
    mse = nn.functional.mse_loss(sr, hr).item()
    psnrs.append(10 * torch.log10(torch.tensor(1.0 / mse)).item())
print(f'PSNR: {sum(psnrs) / len(psnrs):.4f}')
"""


def test_a_validation_per_image_at_batch_size_one_walks_all_of_its_loader() -> None:
    """L9 (SRGAN): a validation loader of batch size 1 whose loop handles its batch as one image (``assert
    lr.shape[0] == 1``, ``ToPILImage()(sr.cpu().squeeze())``, a PSNR per image) got ``sr, hr =
    accelerator.gather_for_metrics((sr, hr))`` after the model: the per-image code then held N images (a crash on 2
    processes). Left unprepared, every process validates every image, as the original did; a loader of batch size 1
    walked by code that handles a batch (an accuracy summed over it) is still prepared and gathered."""
    result = convert_source(PER_IMAGE)
    assert _found(result) == [], _found(result)
    assert "generator, optimizer, train_loader = accelerator.prepare(" in result.new.replace("(\n    ", "("), result.new
    assert "val_loader" not in result.new.split("accelerator.prepare(", 1)[1].split(")", 1)[0], result.new
    assert "gather_for_metrics" not in result.new, result.new
    assert_line, squeeze_line = "    assert lr.shape[0] == 1\n", "    sr_img = ToPILImage()(sr.cpu().squeeze())\n"
    for one_signal in (PER_IMAGE.replace(assert_line, ""), PER_IMAGE.replace(squeeze_line, "")):
        assert "gather_for_metrics" not in convert_source(one_signal).new  # either says it: one image per batch
    read_size = PER_IMAGE.replace("batch_size=1, shuffle", "batch_size=args.val_batch_size, shuffle").replace(
        "\ntrain_loader", "\nargs = argparse.Namespace(val_batch_size=1)\ntrain_loader").replace("import torch\n", "import argparse\nimport torch\n", 1)
    assert "gather_for_metrics" not in convert_source(read_size).new  # its assert says one sample per batch
    assert "gather_for_metrics" in convert_source(read_size.replace(assert_line, "")).new  # a squeeze alone does not
    # (neither signal, and batches of two: a loader of one sample per batch only evaluation walks is left out of
    # ``prepare`` in any case since the sixteenth stop, set W's W7)
    whole = convert_source(PER_IMAGE.replace(assert_line, "").replace(squeeze_line, "").replace(
        "batch_size=1, shuffle", "batch_size=2, shuffle"))
    assert "val_loader = accelerator.prepare(" in whole.new.replace("\n", " ").replace("(    ", "(").replace(
        ", val_loader ) =", ", val_loader = "), whole.new
    assert "        output, hr = accelerator.gather_for_metrics((output, hr))\n" in whole.new, whole.new


SEEDED_BATCHES = """\
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(1337)
block_size = 8
data = torch.arange(200) % 17


def build_dataset(split):
    ix = torch.randint(len(data) - block_size, (4,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + block_size + 1] for i in ix])
    return x, y


def main():
    model = nn.Sequential(nn.Embedding(17, 16), nn.Linear(16, 17))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(4):
        xb, yb = build_dataset('train')
        loss = nn.functional.cross_entropy(model(xb).view(-1, 17), yb.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


if __name__ == '__main__':
    main()
"""


def test_a_seed_set_before_the_accelerator_is_set_again_per_process() -> None:
    """L10 (a character-level GPT): ``torch.manual_seed(1337)`` at module level, the accelerator made later (in
    ``main()`` or the ``__main__`` block), and ``build_dataset`` drawing its offsets with ``torch.randint``: every
    process drew the same batches (N copies of one training, silently; the seed could not be offset where it is).
    Right after the accelerator, every process but process 0 seeds again with the script's seed plus its index (a
    seed of another kind reads ``torch.initial_seed()``); a NumPy seed that is not a number is reported (ACC022)."""
    reseed = ("    accelerator = Accelerator(cpu=True)\n    if accelerator.process_index > 0:\n"
              "        torch.manual_seed(1337 + accelerator.process_index)\n    model = nn.Sequential(")
    result = convert_source(SEEDED_BATCHES)
    assert _found(result) == [], _found(result)
    assert reseed in result.new and "\ntorch.manual_seed(1337)\n" in result.new, result.new
    in_main_block = convert_source(SEEDED_BATCHES.replace("def main():\n", "if __name__ == '__main__':\n").replace(
        "\n\nif __name__ == '__main__':\n    main()\n", ""))
    assert reseed in in_main_block.new, in_main_block.new
    named = convert_source(SEEDED_BATCHES.replace("torch.manual_seed(1337)", "SEED = 1337\ntorch.manual_seed(SEED)"))
    assert "        torch.manual_seed(torch.initial_seed() + accelerator.process_index)\n" in named.new, named.new
    numpy_seed = convert_source(SEEDED_BATCHES.replace("torch.manual_seed(1337)", "SEED = 1\nnp.random.seed(SEED)"))
    assert [w.code for w in numpy_seed.warnings] == ["ACC022"] and "process_index" not in numpy_seed.new, _found(numpy_seed)


def test_the_index_of_an_enumerate_under_a_progress_bar_is_not_gathered() -> None:
    """L9 (SRGAN): ``for image_id, (lr, hr) in tqdm(enumerate(val_loader)):`` took ``image_id`` for a part of the
    batch (the enumerate was looked for only outside a progress bar), so the gather had one value more than the
    loop's outputs: ``sr, image_id, hr = accelerator.gather_for_metrics((sr, image_id, hr))``, and ``if image_id ==
    0:`` then read a tensor. The index is enumerate's, whatever wraps it."""
    source = PER_IMAGE.replace("    assert lr.shape[0] == 1\n", "").replace(
        "    sr_img = ToPILImage()(sr.cpu().squeeze())\n", "    if image_id == 0:\n        print(sr.shape)\n").replace(
        "enumerate(val_loader)", "tqdm(enumerate(val_loader))").replace("import torch\n", "import torch\nfrom tqdm import tqdm\n", 1)
    source = source.replace("batch_size=1, shuffle", "batch_size=2, shuffle")  # (prepared: batches of two)
    result = convert_source(source)
    assert "        output, hr = accelerator.gather_for_metrics((output, hr))\n" in result.new, result.new


CLOSURE = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def training_state(model):
    return {"state_dict": model.state_dict()}


def get_main_loop(model, optimizer, loader):
    def main_loop(epoch):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.save(training_state(model), f"ckpt_{epoch}.pth")
        print(f"epoch {epoch} loss {loss.item():.4f}")

    return main_loop


def train():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    main_loop = get_main_loop(model, optimizer, loader)
    for epoch in range(2):
        main_loop(epoch)


if __name__ == "__main__":
    train()
"""


def test_a_training_closure_a_factory_hands_back_gets_the_accelerator_through_the_factory() -> None:
    """Field D5 (gordicaleksa/pytorch-GAT): the training step is ``main_loop``, a closure ``get_main_loop(...)``
    returns and the training calls through the name it is bound to: no call site to pass the accelerator, so its
    backward, checkpoint and prints were left (ACC009 x2). The factory takes the accelerator and the closure sees it;
    the model handed to ``training_state`` (which saves ``model.state_dict()``) is the unwrapped one."""
    result = convert_source(CLOSURE)
    assert _found(result) == [], _found(result)
    assert "def get_main_loop(model, optimizer, loader, accelerator):\n" in result.new, result.new
    assert "    main_loop = get_main_loop(model, optimizer, loader, accelerator)\n" in result.new, result.new
    assert "            accelerator.backward(loss)\n" in result.new, result.new
    assert 'accelerator.save(training_state(accelerator.unwrap_model(model)), f"ckpt_{epoch}.pth")' in result.new, \
        result.new


def test_an_outer_loop_over_names_calling_a_function_that_trains_walks_no_data() -> None:
    """L7 (one LSTM per stock ticker): ``tic = data.tic.unique(); for i in tqdm(tic): trainModel(i)``, each call
    building its own loaders and training on them, was refused with a false ACC021 ("the training loop walks `tic`
    ... if it is a DataLoader"). A loop whose training is a call of a function with a training loop of its own walks
    names, not batches: the function's loop is the one checked, and its loader is prepared there."""
    result = convert_source(TICKERS)
    assert result.status == "converted" and _found(result) == [], _found(result)
    assert "    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)\n" in result.new, \
        result.new
    assert "    for i in tqdm(tic):\n        trainModel(i)\n" in result.new, result.new
    # the function's own loop walking what the outer loop hands it is still data nobody can follow: refused there
    handed = convert_source(LOADERS_FROM_A_LIBRARY)
    assert [(w.code, w.line) for w in handed.warnings] == [("ACC021", 9)], _found(handed)
    # a callee whose loop walks pieces of what the loop hands it (micro-batches of a batch): the loop walks the data
    pieces = convert_source(MICRO_BATCHES)
    assert [(w.code, w.line) for w in pieces.warnings] == [("ACC021", 17)], _found(pieces)
    # ... or whose loop walks no DataLoader (a critic's n steps on the batch it is handed): the same
    steps = convert_source(CRITIC_STEPS)
    assert [(w.code, w.line) for w in steps.warnings] == [("ACC021", 17)], _found(steps)


def test_a_pytorch_lightning_program_is_left_to_lightning() -> None:
    """L8 (neural collaborative filtering): ``class NCF(pl.LightningModule)`` trained by ``pl.Trainer(devices=-1)``
    was converted, silently: an ``Accelerator`` created inside ``configure_optimizers`` and the optimizer wrapped
    for Lightning. Lightning distributes the program itself: refused (ACC055) at what trains it, with Lightning's
    own settings as the fix; the same for ``lightning``'s spellings and for an entry that only imports the module and
    fits it with a trainer a helper makes, or only evaluates it (its ``configure_optimizers`` was given an
    accelerator all the same)."""
    module = ModuleText("model", "model.py", LIGHTNING_MODULE)
    result = convert_source(LIGHTNING_TRAINER, modules=[module])
    assert result.status == "attention" and _found(result) == ["<string>:ACC055"], _found(result)
    assert result.new == result.old and "`pl.Trainer(...)`" in result.reason and "devices=N" in result.warnings[0].fix
    for spelled in ("import lightning as pl\n", "import lightning.pytorch as pl\n"):
        renamed = convert_source(LIGHTNING_TRAINER.replace("import pytorch_lightning as pl\n", spelled), modules=[
            ModuleText("model", "model.py", LIGHTNING_MODULE.replace("import pytorch_lightning as pl\n", spelled))])
        assert renamed.status == "attention" and _found(renamed) == ["<string>:ACC055"], (spelled, _found(renamed))
    handed = convert_source("from model import Net\nfrom mylib import make_trainer\nmake_trainer().fit(Net())\n",
                            modules=[module])
    assert handed.status == "attention" and _found(handed) == ["model.py:ACC055"], _found(handed)
    assert "`class Net(LightningModule)`" in handed.reason
    # a script that only evaluates it: its configure_optimizers is no training to convert (it got an accelerator)
    evaluated = convert_source("import torch\nfrom model import Net\nnet = Net()\nprint(net(torch.ones(2, 4)))\n",
                               modules=[module])
    assert evaluated.status == "attention" and _found(evaluated) == ["model.py:ACC055"], _found(evaluated)


def test_what_a_data_module_prints_while_it_is_imported_is_printed_once() -> None:
    """L2 (speech commands): ``loader.py`` printed "Preparing file names ..." and the set sizes while the training
    script imported it, on every process (each line N times), and nothing said so. Those prints (at the module's
    top level or in a function it calls there) go through ``PartialState`` with the accelerator's own ``cpu``; a
    print into a file and the module's own ``__main__`` block are not import-time prints (a helper the script calls
    once the accelerator exists prints through ``PartialState()`` as well); where the accelerator's ``cpu`` is an expression the module cannot read, ACC056 says so."""
    result = convert_source(DATA_SCRIPT, modules=[ModuleText("data", "data.py", DATA_MODULE)])
    assert result.status == "converted" and _found(result) == [], _found(result)
    data = result.companions[0].new
    assert "from torch.utils.data import TensorDataset\nfrom accelify.runtime import PartialState\n" in data, data
    assert data.count("    PartialState(cpu=True).print(") == 2 and data.count("PartialState") == 4, data
    # the helper the script calls once the accelerator exists prints once too (S1's class, thirteenth stop)
    assert "    PartialState().print('samples:', len(data))\n" in data and "print('Number of samples:', len(train_data), file=" in data
    assert "    print('a self-test: never runs on import')\n" in data, data
    again = convert_source(result.new, modules=[ModuleText("data", "data.py", data)])
    assert again.new == result.new and all(c.new == c.old for c in again.companions), again.companions
    hub = convert_source(DATA_SCRIPT, modules=[ModuleText("data", "data.py", DATA_MODULE)], target="accelerate")
    assert "from accelerate import PartialState\n" in hub.companions[0].new, hub.companions[0].new
    flagged = DATA_SCRIPT.replace("import torch\n", "import torch\nimport sys\nno_cuda = '--no-cuda' in sys.argv\n", 1)
    flagged = flagged.replace("model = nn.Linear(4, 2)\n", "device = torch.device('cpu' if no_cuda else 'cuda')\n"
                              "model = nn.Linear(4, 2).to(device)\n")
    reported = convert_source(flagged, modules=[ModuleText("data", "data.py", DATA_MODULE)])
    assert _found(reported) == ["data.py:ACC056"], (_found(reported), reported.new)
    joined = "".join(c.new for c in reported.companions)
    assert "PartialState(cpu" not in joined and "    print('Preparing file names" in joined, joined
    assert "    PartialState().print('samples:', len(data))\n" in joined, joined  # made after the accelerator: its state


def test_only_the_modules_own_mode_switch_hands_back_the_same_model() -> None:
    """``.train()``, ``.train(False)``, ``.eval()`` (and placements) return the module; a method of the program's
    own named ``train`` that takes data (``agent.train(loader)``) hands back what it computed, not the agent."""
    import libcst as cst

    from accelify.codemods.analysis.roles import same_module

    for code in ("student.to(device).train()", "student.train(False)", "student.train(mode=True)", "student.eval()"):
        assert cst.Module([]).code_for_node(same_module(cst.parse_expression(code))) == "student", code
    for code in ("agent.train(loader)", "agent.train(epochs=3)"):
        assert cst.Module([]).code_for_node(same_module(cst.parse_expression(code))) == code, code
