"""KeepFullBatches: a loop that skips a loader's short last batch by its size gets a loader of full batches only
(field test I9, shape S1), or the difference is reported (ACC047) where the loader cannot be proven to take it."""

from __future__ import annotations

import pytest

from _convert import codes, converted, dedent

MODEL = """\
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in train:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""

EVALUATE = """\
with torch.no_grad():
    for x, y in test:
        if {test}:
            break
        correct += (model(x).argmax(1) == y).sum().item()
print(correct)
"""


def program(loaders: str, test: str = "len(y) != 4", after: str = "") -> str:
    head = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\ncorrect = 0\n"
    return head + dedent(loaders) + MODEL + EVALUATE.format(test=test) + after


TRAIN = "train = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=4)\n"
TEST_SET = "test_set = TensorDataset(torch.randn(11, 3), torch.randint(0, 2, (11,)))\n"


@pytest.mark.parametrize(
    ("loaders", "test", "expected"),
    [
        # the same literal; the loader's own ``batch_size``; a name never rebound; ``x.size(0) < n``; ``n != x.shape[0]``
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n", "len(y) != 4",
         "test = DataLoader(test_set, batch_size=4, sampler=range(len(test_set) // 4 * 4))\n"),
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n", "y.size(0) != test.batch_size",
         "test = DataLoader(test_set, batch_size=4, sampler=range(len(test_set) // 4 * 4))\n"),
        ("bs = 4\n" + TRAIN + TEST_SET + "test = DataLoader(test_set, bs)\n", "x.size(0) < bs",
         "test = DataLoader(test_set, bs, sampler=range(len(test_set) // bs * bs))\n"),
        ("bs = 4\n" + TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=bs)\n", "bs != x.shape[0]",
         "test = DataLoader(test_set, batch_size=bs, sampler=range(len(test_set) // bs * bs))\n"),
        # shuffled, with a generator: the same draws, cut before the short batch
        (TRAIN + TEST_SET + "g = torch.Generator()\ntest = DataLoader(test_set, batch_size=4, shuffle=True, generator=g)\n",
         "len(y.data) != 4",
         "test = DataLoader(test_set, batch_size=4, sampler=torch.utils.data.RandomSampler(test_set, "
         "num_samples=len(test_set) // 4 * 4, generator=g), generator=g)\n"),
    ],
)
def test_the_loader_makes_only_full_batches(loaders: str, test: str, expected: str) -> None:
    out = converted(program(loaders, test))
    assert expected in out, out
    assert converted(out) == out  # converting again changes nothing


def test_a_loader_built_by_a_function_with_the_batch_size_as_a_parameter() -> None:
    """I9 (Bjarten's early-stopping notebook): ``create_datasets(batch_size)`` builds the loader with its parameter,
    and the test compares with the global ``batch_size`` the call passes; the call is spread over lines."""
    out = converted(dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        def create_datasets(batch_size):
            train_data = TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,)))
            test_data = TensorDataset(torch.randn(11, 3), torch.randint(0, 2, (11,)))
            train_loader = torch.utils.data.DataLoader(train_data, batch_size=batch_size)
            test_loader = torch.utils.data.DataLoader(test_data,
                                                      batch_size=batch_size,
                                                      num_workers=0)
            return train_loader, test_loader
        batch_size = 4
        train, test = create_datasets(batch_size)
        correct = 0
        """) + MODEL + EVALUATE.format(test="len(y) != batch_size"))
    assert ("    test_loader = torch.utils.data.DataLoader(test_data,\n"
            "                                              batch_size=batch_size,\n"
            "                                              sampler=range(len(test_data) // batch_size * batch_size),\n"
            "                                              num_workers=0)\n") in out, out


def test_a_trainer_comparing_with_its_own_attribute() -> None:
    out = converted("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        class Trainer:
            def __init__(self, data, batch_size):
                self.batch_size = batch_size
                self.model = torch.nn.Linear(3, 1)
                self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.loader = DataLoader(data, batch_size=self.batch_size, shuffle=True)
            def train(self):
                for x, y in self.loader:
                    if x.size(0) != self.batch_size:
                        continue
                    self.opt.zero_grad()
                    torch.nn.functional.mse_loss(self.model(x), y).backward()
                    self.opt.step()
        Trainer(TensorDataset(torch.randn(18, 3), torch.randn(18, 1)), 4).train()
        """)
    assert ("sampler=torch.utils.data.RandomSampler(data, num_samples=len(data) // self.batch_size * self.batch_size))"
            in out), out
    assert "shuffle" not in out


@pytest.mark.parametrize(
    ("loaders", "test", "after", "why"),
    [
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n", "len(y) != 8", "", "not provably"),
        ("bs = 4\n" + TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=bs)\nbs = 8\n", "len(y) != bs", "",
         "not provably"),
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4, sampler=range(11))\n", "len(y) != 4", "",
         "its own sampler"),
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4, drop_last=args.drop)\n", "len(y) != 4", "",
         "drops its short last batch"),
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4, shuffle=args.shuffle)\n", "len(y) != 4", "",
         "shuffles"),
        (TRAIN + "test = DataLoader(torch.utils.data.IterableDataset(), batch_size=4)\n", "len(y) != 4", "",
         "map-style"),
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n", "len(y) != 4",
         "print(len(test))\n", "`len()` of the loader"),
        (TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n", "len(y) != 4",
         "with torch.no_grad():\n    for x, y in test:\n        correct += (model(x).argmax(1) == y).sum().item()\n"
         "print(correct)\n", "walked elsewhere"),
    ],
)
def test_what_cannot_be_proven_is_reported_and_the_loader_left(loaders: str, test: str, after: str, why: str) -> None:
    from accelify.pipeline import convert_source

    code = program(loaders, test, after)
    result = convert_source(code)
    warnings = [w for w in result.warnings if w.code == "ACC047"]
    assert len(warnings) == 1 and why in warnings[0].message, [w.message for w in result.warnings]
    test_line = next(line for line in code.splitlines() if line.startswith("test = "))
    assert test_line + "\n" in result.new  # the loader as it was


def test_near_misses() -> None:
    # drop_last=True: there is no short batch; a loader that is not prepared: every process walks all of it
    assert "ACC047" not in " ".join(codes(program(TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4, drop_last=True)\n")))
    out = converted(program(TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4, drop_last=True)\n"))
    assert "sampler=" not in out
    # a size test that is not the whole body of its ``if`` (something else runs first): not this shape
    out = converted(program(TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n").replace(
        "            break\n", "            print('short')\n            break\n"))
    assert "sampler=" not in out


def test_a_converted_file_is_reported_again_only_where_the_loader_was_left() -> None:
    """``convert --check`` on converted code: ACC047 stays until the loader is fixed; a loader built with full batches
    only (by the rule or by hand) is not a skip any more."""
    from accelify.pipeline import convert_source

    left = convert_source(program(TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n", "len(y) != 8"))
    again = convert_source(left.new)
    assert again.status == "unchanged" and [w.code for w in again.warnings].count("ACC047") == 1
    fixed = convert_source(program(TRAIN + TEST_SET + "test = DataLoader(test_set, batch_size=4)\n"))
    assert "ACC047" not in [w.code for w in convert_source(fixed.new).warnings]
