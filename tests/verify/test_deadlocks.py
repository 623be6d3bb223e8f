"""The static half of verify: collectives under process-local conditions, read from the converted program."""

from __future__ import annotations

import textwrap

from accelify.verify.deadlocks import latent_deadlocks

HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, opt, loader = accelerator.prepare(model, opt, loader)
"""


def _found(body: str, *modules: tuple[str, str]) -> list[str]:
    return [d.format() for d in latent_deadlocks(("train.py", HEAD + textwrap.dedent(body)), modules)]


def test_a_collective_under_a_test_on_the_local_loss_is_named_with_its_line() -> None:
    found = _found("""\
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            if loss.item() > 1:
                accelerator.wait_for_everyone()
        """)
    assert len(found) == 1 and found[0].startswith("train.py:15: accelerator.wait_for_everyone() sits under an `if`")
    assert "`loss.item() > 1`" in found[0]


def test_rank_tests_torch_distributed_and_local_loop_exits_are_found() -> None:
    found = _found("""\
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            if accelerator.is_main_process:
                dist.barrier()
            if loss.item() < 1e-3:
                break
        """)
    assert any("train.py:13: accelerator.backward()" in f and "`break` under `if loss.item() < 1e-3`" in f for f in found)
    assert any("train.py:15: dist.barrier() sits under an `if`" in f for f in found)


def test_agreed_places_are_not_findings() -> None:
    found = _found("""\
        from tqdm import tqdm
        best = None
        for epoch in tqdm(range(3), disable=not accelerator.is_main_process):
            for step, (x, y) in enumerate(tqdm(loader, disable=not accelerator.is_local_main_process)):
                loss = ((model(x) - y) ** 2).mean()
                accelerator.backward(loss)
                opt.step()
            total = accelerator.reduce(loss.detach(), reduction="mean")
            if total.item() < 1e-3:
                accelerator.wait_for_everyone()
                break
            if accelerator.is_main_process:
                accelerator.save(model.state_dict(), "m.pt")
            accelerator.wait_for_everyone()
        """)
    assert found == []


def test_a_helper_module_called_from_a_local_branch_is_named_in_its_file() -> None:
    helper = ("evaluation.py", "def sync(accelerator):\n    accelerator.wait_for_everyone()\n")
    found = _found("""\
        from evaluation import sync
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            if loss.item() > 1:
                sync(accelerator)
        """, helper)
    assert found and found[0].startswith("evaluation.py:2: accelerator.wait_for_everyone() is in `sync`")


def test_a_file_that_does_not_parse_has_no_findings() -> None:
    assert latent_deadlocks(("train.py", "def (:\n")) == []


def test_a_time_parsed_from_a_folder_name_is_no_clock_read_but_the_clock_is() -> None:
    """Resume code sorts checkpoint folders by the time in their names (``datetime.strptime``, pytorch-cifar100's
    utils): every process reads the same names, so a loop that skips epochs by them agrees; one that stops on the
    clock does not."""
    utils = textwrap.dedent("""\
        import datetime
        import os
        def most_recent(root, fmt):
            folders = sorted(os.listdir(root), key=lambda f: datetime.datetime.strptime(f, fmt))
            return folders[-1]
        """)
    body = """\
        import time
        from utils import most_recent
        resume_epoch = int(most_recent(".", fmt="%Y"))
        for epoch in range(3):
            if epoch <= resume_epoch:
                continue
            for x, y in loader:
                accelerator.backward(((model(x) - y) ** 2).mean())
            accelerator.wait_for_everyone()
        """
    assert _found(body, ("utils.py", utils)) == []
    clocked = body.replace("resume_epoch = int(most_recent", "resume_epoch = int(time.time()) % 3 or int(most_recent")
    assert any("`if epoch <= resume_epoch`" in f for f in _found(clocked, ("utils.py", utils)))


def test_a_barrier_in_a_method_of_an_object_kept_to_the_main_process_is_found() -> None:
    """diegoalejogm/gans (set I, W1) as first converted: the logger made on the main process only (`... if
    accelerator.is_main_process else None`), each call of its methods guarded, and a barrier inside `save_models`."""
    found = _found("""\
        class Logger:
            def __init__(self, accelerator):
                self.accelerator = accelerator

            def save_models(self, model):
                self.accelerator.wait_for_everyone()
                self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), "m.pt")


        logger = Logger(accelerator) if accelerator.is_main_process else None
        for x, y in loader:
            accelerator.backward(((model(x) - y) ** 2).mean())
            if accelerator.is_main_process:
                logger.save_models(model)
        """)
    assert len(found) == 1 and found[0].startswith("train.py:16: self.accelerator.wait_for_everyone() is in `save_models`")


EVEN = """\
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
from accelify.runtime import Accelerator


class Pairs(Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.x[i].sum(0, keepdim=True)


class Trainer:
    def __init__(self, batch_size):
        self.batch_size = batch_size
        self.accelerator = Accelerator()
        self.model = torch.nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loader = DataLoader(Pairs(50), batch_size=batch_size, shuffle=True)
        self.model, self.optimizer, self.loader = self.accelerator.prepare(self.model, self.optimizer, self.loader)

    def train(self):
        for i, (images, targets) in enumerate(self.loader):
            if images.size()[0] != self.batch_size:
                continue
            loss = ((self.model(images) - targets) ** 2).mean()
            self.optimizer.zero_grad()
            self.accelerator.backward(loss)
            self.optimizer.step()


Trainer(16).train()
"""


def _even(old: str = "", new: str = "") -> list[str]:
    source = EVEN.replace(old, new) if old else EVEN
    assert source != EVEN or not old, f"{old!r} is not in the program"
    return [d.format() for d in latent_deadlocks(("train.py", source))]


def test_a_skip_on_the_batch_size_of_a_prepared_map_style_loader_is_no_deadlock() -> None:
    """Under even_batches every process gets full batches of a map-style dataset at every step (the last round is
    completed from the start): ``if images.size()[0] != self.batch_size: continue`` takes the same branch everywhere,
    in each spelling of the size."""
    assert _even() == []
    assert _even("images.size()[0]", "len(images)") == []
    assert _even("images.size()[0]", "images.shape[0]") == []
    assert _even("images.size()[0] != self.batch_size", "images.size(0) < targets.size(0)") == []
    assert _even("shuffle=True)", "shuffle=True, drop_last=True)") == []
    assert _even("Pairs(50)", "torch.utils.data.TensorDataset(torch.randn(50, 8), torch.randn(50, 1))") == []


def test_a_batch_size_test_that_may_differ_between_processes_is_still_found() -> None:
    """Not provably even: an iterable dataset (its stream's last batch may be short on one process only), a collate
    function of the script's own (it may drop samples), a batch sampler (batches of varying size), even_batches
    turned off, a batch filtered before the test, a size compared with a local value, a dataset the program does not
    show."""
    near_misses = {
        "iterable": ("class Pairs(Dataset)", "class Pairs(IterableDataset)"),
        "collate": ("shuffle=True)", "shuffle=True, collate_fn=lambda items: items)"),
        "batch sampler": ("batch_size=batch_size, shuffle=True)", "batch_sampler=[[0, 1], [2]])"),
        "uneven": ("Accelerator()", "Accelerator(even_batches=False)"),
        "filtered": ("            if images.size()[0]", "            images = images[images[:, 0] > 0]\n"
                                                       "            if images.size()[0]"),
        "local value": ("!= self.batch_size", "!= int(targets.sum())"),
        "unknown dataset": ("Pairs(50)", "load_pairs(50)"),
    }
    for name, (old, new) in near_misses.items():
        found = _even(old, new)
        assert len(found) == 1 and "`continue` under `if images.size()[0]" in found[0], f"{name}: {found}"
