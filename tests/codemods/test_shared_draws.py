"""SeedSharedDraws: values drawn before training with no seed are seeded alike on every process."""

from __future__ import annotations

import pytest
from _convert import codes, converted, dedent

LOOP = (
    "    loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
    "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    for xb, yb in loader:\n"
    "        torch.nn.functional.mse_loss(model(xb), yb).backward()\n"
    "        optimizer.step()\n"
)
HEAD = "import random\nimport numpy as np\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset, random_split\n"


@pytest.mark.parametrize(
    "code, before, seeds",
    [
        # a target drawn at import time, before main() builds anything
        (
            "W = torch.randn(4, 1)\n\ndef main():\n    x = torch.randn(64, 4)\n    ds = TensorDataset(x, x @ W)\n"
            "    model = torch.nn.Linear(4, 1)\n" + LOOP + "\nmain()\n",
            "W = torch.randn(4, 1)",
            "torch.manual_seed(0)",
        ),
        # the data made by a helper, after the model: the seed goes before the first use of the random state
        (
            "def make(n):\n    x = np.random.randn(n, 4).astype('float32')\n    x = torch.from_numpy(x)\n"
            "    return TensorDataset(x, x.sum(1, keepdim=True))\n\n"
            "def main():\n    model = torch.nn.Linear(4, 1)\n    ds = make(64)\n" + LOOP,
            "    model = torch.nn.Linear(4, 1)",
            "    np.random.seed(0)",
        ),
        # a split drawn from torch's generator, and Python's random
        (
            "def main():\n    x = torch.randn(64, 4)\n    k = random.randint(0, 3)\n"
            "    ds, val = random_split(TensorDataset(x, x[:, k:k + 1]), [48, 16])\n"
            "    model = torch.nn.Linear(4, 1)\n" + LOOP,
            "    x = torch.randn(64, 4)",
            "    random.seed(0)\n    torch.manual_seed(0)",
        ),
        # a data set class that draws its samples in __init__
        (
            "class Synthetic(torch.utils.data.Dataset):\n    def __init__(self, n):\n        self.x = torch.rand(n, 4)\n"
            "    def __len__(self):\n        return len(self.x)\n    def __getitem__(self, i):\n        return self.x[i], self.x[i].sum(0, keepdim=True)\n\n"
            "def main():\n    ds = Synthetic(64)\n    model = torch.nn.Linear(4, 1)\n" + LOOP,
            "    ds = Synthetic(64)",
            "    torch.manual_seed(0)",
        ),
    ],
)
def test_seeded_before_the_first_use(code: str, before: str, seeds: str) -> None:
    new = converted(HEAD + code)
    assert f"{seeds}\n{before}\n" in new, new
    assert new.count("seed(0)") == seeds.count("seed(0)")


@pytest.mark.parametrize(
    "code",
    [
        # seeded before the draws
        "def main():\n    torch.manual_seed(3)\n    x = torch.randn(64, 4)\n    ds = TensorDataset(x, x)\n"
        "    model = torch.nn.Linear(4, 4)\n" + LOOP,
        "def main():\n    np.random.seed(3)\n    x = torch.from_numpy(np.random.rand(64, 4))\n    ds = TensorDataset(x, x)\n"
        "    model = torch.nn.Linear(4, 4)\n" + LOOP,
        # drawn from a generator of its own
        "def main():\n    g = torch.Generator().manual_seed(5)\n    x = torch.randn(64, 4, generator=g)\n"
        "    ds = TensorDataset(x, x)\n    model = torch.nn.Linear(4, 4)\n" + LOOP,
        # only the model's own weights are random (prepare broadcasts them); noise drawn while training
        "def main():\n    ds = TensorDataset(torch.ones(64, 4), torch.ones(64, 4))\n    model = torch.nn.Linear(4, 4)\n"
        + LOOP.replace("model(xb)", "model(xb + torch.randn_like(xb))"),
        # samples drawn right into a data set: each process its own samples of one distribution
        "def main():\n    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 4).float())\n    model = torch.nn.Linear(4, 4)\n"
        + LOOP,
        # a seed drawn at random, then set (DCGAN's --manualSeed): each run its own seed, as before
        "def main():\n    seed = random.randint(1, 10000)\n    torch.manual_seed(seed)\n    x = torch.randn(64, 4)\n"
        "    ds = TensorDataset(x, x)\n    model = torch.nn.Linear(4, 4)\n" + LOOP,
    ],
)
def test_near_misses(code: str) -> None:
    new = converted(HEAD + code)
    assert "seed(0)" not in new
    assert not any(c.startswith("ACC032") for c in codes(HEAD + code))


def test_numpy_imported_by_name_only_is_imported_for_its_seed() -> None:
    # ``from numpy.random import rand``: the module is imported for the seed (field A16's ``random.shuffle`` in a
    # data module the entry does not import ``random`` for was reported before, and left to differ per process)
    code = (
        "import torch\nfrom numpy.random import rand\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "def main():\n    x = torch.from_numpy(rand(64, 4)).float()\n    ds = TensorDataset(x, x)\n"
        "    model = torch.nn.Linear(4, 4)\n" + LOOP
    )
    new = converted(code)
    assert "\nimport numpy\n" in new and "    numpy.random.seed(0)\n    x = torch.from_numpy(rand(64, 4))" in new, new
    assert not any(c.startswith("ACC032") for c in codes(code))


def test_a_library_name_the_module_binds_otherwise_is_reported() -> None:
    code = (
        "import torch\nfrom numpy.random import rand\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "numpy = None\n"
        "def main():\n    x = torch.from_numpy(rand(64, 4)).float()\n    ds = TensorDataset(x, x)\n"
        "    model = torch.nn.Linear(4, 4)\n" + LOOP
    )
    assert "seed(0)" not in converted(code)
    assert codes(code) == ["ACC032:6"]


def _folds(imports: str, splitter: str) -> str:
    """A program that trains on one fold of ``splitter``, drawn before training."""
    return (
        HEAD + imports + "from torch.utils.data import Subset\n"
        "def main():\n    x = torch.ones(64, 4)\n    full = TensorDataset(x, x)\n"
        f"    splitter = {splitter}\n    train_idx, val_idx = next(splitter.split(np.zeros(64), np.arange(64) % 2))\n"
        "    ds = Subset(full, train_idx)\n    model = torch.nn.Linear(4, 4)\n" + LOOP + "\nmain()\n"
    )


@pytest.mark.parametrize(
    "imports, splitter",
    [
        ("from sklearn.model_selection import KFold\n", "KFold(n_splits=3, shuffle=True)"),
        ("from sklearn import model_selection\n", "model_selection.KFold(n_splits=3, shuffle=True)"),
        ("from sklearn.model_selection import StratifiedKFold\n", "StratifiedKFold(3, shuffle=True, random_state=None)"),
        ("from sklearn import model_selection\n", "model_selection.ShuffleSplit(n_splits=1, test_size=0.25)"),
        ("from sklearn.model_selection import StratifiedShuffleSplit\n", "StratifiedShuffleSplit(test_size=0.25)"),
        ("import sklearn.model_selection\n", "sklearn.model_selection.GroupShuffleSplit(test_size=0.25)"),
    ],
)
def test_unseeded_folds_are_seeded(imports: str, splitter: str) -> None:
    # each process would otherwise split NumPy's global state its own way and train on its own fold
    new = converted(_folds(imports, splitter))
    assert f"    np.random.seed(0)\n    splitter = {splitter}\n" in new, new
    assert new.count("seed(0)") == 1


@pytest.mark.parametrize(
    "imports, splitter",
    [
        ("from sklearn.model_selection import KFold\n", "KFold(n_splits=3)"),
        ("from sklearn.model_selection import KFold\n", "KFold(n_splits=3, shuffle=False)"),
        ("from sklearn import model_selection\n", "model_selection.KFold(n_splits=3, shuffle=True, random_state=1)"),
        ("from sklearn import model_selection\n", "model_selection.ShuffleSplit(test_size=0.25, random_state=0)"),
    ],
)
def test_folds_not_drawn_or_seeded_are_left(imports: str, splitter: str) -> None:
    code = _folds(imports, splitter)
    assert "seed(0)" not in converted(code)
    assert not any(c.startswith("ACC032") for c in codes(code))


def test_folds_without_numpy_module_import_it_for_the_seed() -> None:
    code = _folds("from sklearn.model_selection import KFold\n", "KFold(n_splits=3, shuffle=True)").replace(
        "import numpy as np\n", "from numpy import zeros, arange\n").replace("np.zeros", "zeros").replace("np.arange", "arange")
    new = converted(code)
    assert "\nimport numpy\n" in new and "    numpy.random.seed(0)\n    splitter = KFold(" in new, new
    assert not any(c.startswith("ACC032") for c in codes(code))


GAN = """\
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
D = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
G = nn.Linear(3, 4)
d_opt = torch.optim.Adam(D.parameters(), lr=1e-3)
g_opt = torch.optim.Adam(G.parameters(), lr=1e-3)
bce = nn.BCELoss()
test_noise = torch.randn(4, 3)
for (real,) in loader:
    fake = G(torch.randn(real.size(0), 3))
    d_opt.zero_grad()
    d_loss = bce(D(real), torch.ones(real.size(0), 1)) + bce(D(fake.detach()), torch.zeros(real.size(0), 1))
    d_loss.backward()
    d_opt.step()
    g_opt.zero_grad()
    bce(D(fake), torch.ones(real.size(0), 1)).backward()
    g_opt.step()
print(G(test_noise).sum().item())
"""


def test_each_process_draws_its_own_stream_after_the_shared_draws() -> None:
    """diegoalejogm/gans (field set I, W8): the seed that makes ``test_noise`` alike also made every step's noise alike
    on every process (the N fake batches were copies). After the last shared draw, every process but process 0 seeds
    its own stream; process 0 goes on with the original's."""
    new = converted(GAN)
    assert "torch.manual_seed(0)\nD = nn.Sequential" in new, new
    assert ("test_noise = torch.randn(4, 3)\n"
            "if accelerator.process_index > 0:\n"
            "    torch.manual_seed(accelerator.process_index)\n"
            "for (real,) in loader:\n") in new, new


def test_each_library_seeded_alike_gets_its_own_stream_again() -> None:
    new = converted(
        HEAD + "def main():\n    x = torch.randn(64, 4)\n    k = random.randint(0, 3)\n"
        "    ds, val = random_split(TensorDataset(x, x[:, k:k + 1]), [48, 16])\n"
        "    model = torch.nn.Linear(4, 1)\n" + LOOP
    )
    assert ("    ds, val = random_split(TensorDataset(x, x[:, k:k + 1]), [48, 16])\n"
            "    if accelerator.process_index > 0:\n"
            "        random.seed(accelerator.process_index)\n"
            "        torch.manual_seed(accelerator.process_index)\n"
            "    model = torch.nn.Linear(4, 1)\n") in new, new


def test_drawn_at_import_time_the_own_stream_starts_before_the_training() -> None:
    """The shared value drawn at module level, the accelerator made in ``main()``: the per-process seed goes where
    the accelerator exists, right before the loop that trains."""
    new = converted(HEAD + "W = torch.randn(4, 1)\n\ndef main():\n    ds = TensorDataset(torch.ones(64, 4), torch.ones(64, 1))\n"
                    "    model = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))\n" + LOOP
                    + "\nif __name__ == '__main__':\n    main()\n")
    assert "torch.manual_seed(0)\nW = torch.randn(4, 1)\n" in new, new
    assert ("    if accelerator.process_index > 0:\n"
            "        torch.manual_seed(accelerator.process_index)\n"
            "    for xb, yb in loader:\n") in new, new


def test_a_split_drawn_in_a_method_of_a_helper_object_the_trainer_holds_is_seeded() -> None:
    """FernandoLpz's ``Execute.__init__`` runs ``self.preprocessing = Preprocessing(args)`` then
    ``self.preprocessing.load_data()``, which calls ``train_test_split`` with no ``random_state``: each process
    would split differently (and score its gathered test predictions against its own labels)."""
    new = converted('''
    import numpy as np
    import torch
    from sklearn.model_selection import train_test_split
    from torch.utils.data import DataLoader, TensorDataset


    class Preprocessing:
        def load_data(self):
            x = np.ones((8, 2), dtype="float32")
            self.x_train, self.x_test = train_test_split(x, test_size=0.25)


    class Execute:
        def __init__(self):
            self.preprocessing = Preprocessing()
            self.preprocessing.load_data()
            self.model = torch.nn.Linear(2, 1)

        def train(self):
            x = torch.from_numpy(self.preprocessing.x_train)
            loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=2)
            optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            for xb, yb in loader:
                torch.nn.functional.mse_loss(self.model(xb), yb).backward()
                optimizer.step()


    execute = Execute()
    execute.train()
    ''')
    assert "np.random.seed(0)\nexecute = Execute()\n" in new, new


def test_a_draw_right_after_its_own_seed_in_a_data_set_is_no_unseeded_draw() -> None:
    """brain-segmentation's data set picks its validation patients with ``random.seed(seed)`` then
    ``random.sample(...)`` in ``__init__``: every process picks the same ones, so nothing is reported or seeded."""
    code = HEAD + (
        "class Patients(torch.utils.data.Dataset):\n"
        "    def __init__(self, seed=42):\n"
        "        names = [str(i) for i in range(10)]\n"
        "        random.seed(seed)\n"
        "        keep = random.sample(names, k=4)\n"
        "        self.x = torch.ones(len(keep) * 16, 4)\n"
        "    def __len__(self):\n"
        "        return len(self.x)\n"
        "    def __getitem__(self, i):\n"
        "        return self.x[i], self.x[i, :1]\n\n"
        "def main():\n    ds = Patients()\n    model = torch.nn.Linear(4, 1)\n" + LOOP
    )
    assert codes(code) == []
    assert "random.seed(0)" not in converted(code)


def test_folds_a_training_loop_draws_in_its_header_get_each_process_stream_in_its_body() -> None:
    """Field F10 (a book recommender's trainer): ``self.kf = KFold(n, shuffle=True)`` in ``__init__``, ``for fold,
    (tr, va) in enumerate(self.kf.split(ds)):`` around the training. The folds are drawn from NumPy's global state
    when that loop starts, not when the splitter is made: each process's own stream was seeded before the loop, so
    every process trained and validated on folds of its own. It now starts in the loop's body, after the draw."""
    code = dedent("""
        import numpy as np
        import torch
        from sklearn.model_selection import KFold
        from torch.utils.data import DataLoader, Subset, TensorDataset


        class Trainer:
            def __init__(self, n_folds):
                self.model = torch.nn.Linear(4, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.kf = KFold(n_splits=n_folds, shuffle=True)

            def train(self, ds):
                for fold, (train_idxs, val_idxs) in enumerate(self.kf.split(ds)):
                    loader = DataLoader(Subset(ds, train_idxs), batch_size=4, shuffle=True)
                    for x, y in loader:
                        loss = torch.nn.functional.mse_loss(self.model(x), y)
                        self.optimizer.zero_grad()
                        loss.backward()
                        self.optimizer.step()


        if __name__ == "__main__":
            trainer = Trainer(3)
            trainer.train(TensorDataset(torch.randn(24, 4), torch.randn(24, 1)))
        """)
    new = converted(code)
    assert ("        for fold, (train_idxs, val_idxs) in enumerate(self.kf.split(ds)):\n"
            "            if self.accelerator.process_index > 0:\n"
            "                np.random.seed(self.accelerator.process_index)\n") in new, new
    assert new.count("np.random.seed(") == 2, new  # the shared seed before the splitter, and the own streams
    built_there = converted(code.replace("            trainer = Trainer(3)\n            trainer.train(",
                                         "            Trainer(3).train("))
    assert "np.random.seed(0)\n" in built_there and ("            if self.accelerator.process_index > 0:\n"
                                                     "                np.random.seed(self.accelerator.process_index)\n"
                                                     ) in built_there, built_there


SPLIT_BY_A_DATA_CLASS = """\
import numpy as np
import torch


class DataGenerator:
    def __init__(self, pairs, ratio=0.8):
        indices = list(range(len(pairs)))
        np.random.shuffle(indices)
        cut = int(len(pairs) * ratio)
        self.train = [pairs[i] for i in indices[:cut]]
        self.test = [pairs[i] for i in indices[cut:]]

    def train_generator(self, batch_size):
        order = np.random.permutation(len(self.train))
        for start in range(0, len(order), batch_size):
            yield [self.train[i] for i in order[start:start + batch_size]]


def main():
    pairs = [(torch.randn(4), torch.randn(1)) for _ in range(100)]
    data_generator = DataGenerator(pairs)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for batch in data_generator.train_generator(8):
            x = torch.stack([p[0] for p in batch])
            y = torch.stack([p[1] for p in batch])
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_a_split_drawn_before_training_is_seeded_even_where_the_training_draws_its_batches_as_it_goes() -> None:
    """L4 (seq2seq): a data class splits train/test with an unseeded ``np.random.shuffle`` and its generator shuffles
    again each epoch. The split was reported (ACC032, "the training draws as it goes") and left to differ per process:
    one process's test sentences were another's training sentences. The split is now seeded alike, and each process
    gets its own stream back right after it, so the batches it draws as it goes are still its own."""
    new = converted(SPLIT_BY_A_DATA_CLASS)
    assert "    np.random.seed(0)\n    torch.manual_seed(0)\n    pairs = " in new, new
    assert ("    data_generator = DataGenerator(pairs)\n    if accelerator.process_index > 0:\n"
            "        np.random.seed(accelerator.process_index)\n        torch.manual_seed(accelerator.process_index)\n") in new, new
    assert not any(c.startswith("ACC032") for c in codes(SPLIT_BY_A_DATA_CLASS))
